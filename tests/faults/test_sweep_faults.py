"""Faults in a sweep on a local Ray instance, injected for real:
- a worker SIGKILLed mid-episode: Ray retries the task, the retry resumes after the last logged point, and the
  episode ends with the trades of an uninterrupted run, every point logged once, no duplicate event, an intact
  hash chain, and the cut-off cycle marked superseded in the audit;
- the whole sweep interrupted (Ctrl-C on the driver): `--resume` finishes it without re-running what finished."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from pymongo import MongoClient

from database import connect
from tests.faults.backtest_runs import LOOSE
from tests.helpers import local_ray

pytestmark = [pytest.mark.integration, pytest.mark.requires("ray")]

CLI = [sys.executable, "-m", "graph.transports.cli"]
ENV = {**os.environ, "TRADEGRAPH_LLM": "offline"}


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _start(argv, env=ENV) -> subprocess.Popen:
    # SIGINT restored for the child: a background CI job starts its children with it ignored
    return subprocess.Popen(
        CLI + argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait(cond, proc, what: str, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        assert proc.poll() is None, f"the sweep ended before {what}: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_killed_mid_episode_is_retried_and_resumes_with_no_duplicate_and_no_double_fill(
    embedded_uri, tmp_path, uninterrupted
):
    db = f"{embedded_uri}/sweep_kill_{uuid.uuid4().hex[:8]}"
    limits = tmp_path / "loose.toml"
    limits.write_text(LOOSE)
    env = {**ENV, "TRADEGRAPH_RISK_LIMITS": str(limits)}
    window = ["--symbols", "AAPL,MSFT", "--every", "5"]
    # the backtest faults' window and limits (tests/faults/backtest_runs.py: 10 points, and it trades under them), so
    # the run they compare with is this episode's too; the kill lands after the third, with most of it to go
    proc = _start(
        [
            "sweep",
            *window,
            "--windows",
            "2011-01-03..2011-03-14",
            "--workers",
            "1",
            "--sweep-id",
            "k",
            "--db",
            db,
            "--out",
            str(tmp_path / "exp"),
            "--json",
        ],
        env,
    )
    mongo = MongoClient(db).get_default_database()
    doc = _wait(
        lambda: mongo.sweep_episodes.find_one({"_id": "k-e000", "done": {"$gte": 3}}), proc, "three logged points"
    )
    log = tmp_path / "exp" / "k" / "episodes" / "k-e000" / "episode_log.jsonl"

    def mid_cycle():  # a cycle past the logged points is a few requests in (of ~27: far from its log line)
        logged = [s["agent_output"]["cycle_id"] for s in _lines(log)]
        return (
            mongo.state_events.count_documents(
                {"session_id": "bt-k-e000", "kind": "llm_request", "cycle_id": {"$nin": logged}}
            )
            >= 3
        )

    _wait(mid_cycle, proc, "a cycle under way")
    os.kill(doc["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    (row,) = _lines(tmp_path / "exp" / "k" / "results.jsonl")
    assert row["status"] == "succeeded" and row["attempts"] == 2, row

    run_dir = tmp_path / "exp" / "k" / "episodes" / "k-e000"
    steps = _lines(run_dir / "episode_log.jsonl")
    assert [s["decision_point_idx"] for s in steps] == list(range(row["decision_points"]))

    # the same config run uninterrupted as a backtest (tests/faults/conftest.py: made once for the fault tests)
    alone_dir, _ = uninterrupted
    mine = json.loads((run_dir / "trade_history.json").read_text())
    assert mine["trades"], "the loose limits let the episode trade"
    assert mine == json.loads((alone_dir / "trade_history.json").read_text()), "no fill lost or doubled by the kill"
    assert [(s["action"], s["equity"]) for s in steps] == [
        (s["action"], s["equity"]) for s in _lines(alone_dir / "episode_log.jsonl")
    ]

    store = connect(db)
    try:
        session = row["session_id"]
        events = store.events.read(session)
        assert len({e["event_id"] for e in events}) == len(events)
        assert store.events.verify_chain(session)["ok"]
        cycles = store.events.cycle_ids(session)
        logged = {s["agent_output"]["cycle_id"] for s in steps}
        cut_off = [c for c in cycles if c not in logged]
        superseded = [
            e["cycle_id"] for e in events if e["kind"] == "error" and e["payload"].get("type") == "cycle_superseded"
        ]
        assert len(cut_off) == 1 and superseded == cut_off, "the cut-off cycle is marked superseded, once"
        # what a cut-off cycle memorised is withdrawn: recalled later, it made the resumed run decide otherwise
        assert not [m for m in store.memories.list(session_id=session, limit=0) if m.cycle_id in cut_off]
        assert {m.cycle_id for m in store.memories.list(session_id=session, limit=0)} <= logged
    finally:
        store.close()


def test_an_interrupted_sweep_resumes_by_its_id_without_rerunning_finished_episodes(embedded_uri, tmp_path, tradegraph):
    db = f"{embedded_uri}/sweep_resume_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "exp"
    proc = _start(
        [
            "sweep",
            "--symbols",
            "AAPL",
            "--symbols",
            "MSFT",
            "--symbols",
            "IBM",
            "--windows",
            "2011-01-03..2011-01-31",  # 5 points each: the first finishes while the second runs, the third waits
            "--every",
            "5",
            "--workers",
            "1",
            "--sweep-id",
            "r",
            "--db",
            db,
            "--out",
            str(out),
            "--json",
        ]
    )
    _wait(
        lambda: any(r["status"] == "succeeded" for r in _lines(out / "r" / "results.jsonl")),
        proc,
        "the first finished episode",
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "--resume r" in err, err
    before = {r["episode_id"]: r for r in _lines(out / "r" / "results.jsonl")}
    assert 1 <= sum(r["status"] == "succeeded" for r in before.values()) < 3

    events = MongoClient(db).get_default_database().state_events
    counts = {
        r["session_id"]: events.count_documents({"session_id": r["session_id"]})
        for r in before.values()
        if r["status"] == "succeeded"
    }
    # in process: what is checked is what the resume runs, not its process (it starts and stops its own Ray here)
    again = tradegraph("sweep", "--resume", "r", "--db", db, "--out", str(out), "--json")
    assert again.returncode == 0, again.stderr
    after = {r["episode_id"]: r for r in _lines(out / "r" / "results.jsonl")}
    assert [r["status"] for r in after.values()] == ["succeeded"] * 3
    for eid, r in before.items():
        if r["status"] == "succeeded":
            assert after[eid] == r, "a finished episode is not run again"
    assert {s: events.count_documents({"session_id": s}) for s in counts} == counts


def test_a_cancelled_sweep_task_resumes_through_the_kernel_to_the_same_rows(embedded_uri, tmp_path):
    from graph.kernel.core import Kernel

    db = f"{embedded_uri}/sweep_task_{uuid.uuid4().hex[:8]}"
    k = Kernel.open(db, experiments_dir=tmp_path)
    # the task and its resume run in this process and join one local instance, as a sweep joins a Ray its caller
    # initialized, instead of starting and stopping one each (a sweep's own instance: the two tests above)
    with local_ray(2), contextlib.closing(k):
        grid = {
            "universes": [["AAPL"], ["MSFT"]],
            "workers": 1,
            "every": 5,
            "sweep_id": "t",
            "windows": {"kind": "list", "spans": [["2011-01-03", "2011-01-31"]]},
        }
        task = k.call("start_sweep", grid)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(
            r["status"] == "succeeded" for r in _lines(tmp_path / "t" / "results.jsonl")
        ):
            time.sleep(0.05)
        k.call("cancel_task", {"task_id": task.task_id})
        k.tasks.join(task.task_id)
        stopped = k.call("task_status", {"task_id": task.task_id})
        assert stopped.status == "cancelled" and stopped.resumable, stopped
        assert stopped.summary["cancelled"] and stopped.summary["by_status"].get("succeeded", 0) == 1
        k.call("resume_task", {"task_id": task.task_id})
        k.tasks.join(task.task_id)
        done = k.call("task_status", {"task_id": task.task_id})
        assert done.status == "succeeded" and done.summary["by_status"] == {"succeeded": 2}, done
        assert done.progress.done == done.progress.total == 2
