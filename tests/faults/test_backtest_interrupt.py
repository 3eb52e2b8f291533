"""Ctrl-C on a foreground `tradegraph backtest`: the kernel task it runs is cancelled after the current
decision point (status `cancelled`, never left `running`), the log holds a clean prefix, and the same command
with the same --run-id resumes it to the end. Ctrl-C twice stops at once: the point under way is not logged, and
the resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from graph.kernel.core import Kernel
from tests.faults.backtest_runs import (
    RUN_ID,
    backtest,
    compare_with_uninterrupted,
    freeze_mid_cycle,
    interrupt,
    reached,
    stored_ids,
    superseded_cycles,
    under_way,
    verify_as_uninterrupted,
)

pytestmark = pytest.mark.integration


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_sigint_cancels_the_task_and_the_run_resumes(embedded_uri, tmp_path, tradegraph):
    db = f"{embedded_uri}/bt_sigint_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "exp"
    # 20 daily points: Ctrl-C lands after the third with most of them to go (each takes ~1 s under a full run's
    # load, and the run stops after the one under way); the half year it ran before made the resumed run 120 points
    # long for nothing more to check
    argv = [
        sys.executable,
        "-m",
        "graph.transports.cli",
        "backtest",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2011-01-03",
        "--end",
        "2011-01-31",
        "--run-id",
        "sig",
        "--json",
        "--db",
        db,
        "--out",
        str(out),
    ]
    env = {**os.environ, "TRADEGRAPH_LLM": "offline"}
    # a shell starting a background job (CI under `cmd &`) leaves SIGINT ignored, and a child keeps that, so
    # Python would never raise KeyboardInterrupt: the terminal's default is restored for the child
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    log = out / "sig" / "episode_log.jsonl"
    deadline = time.monotonic() + 300  # a cold first process on a loaded machine
    while len(_lines(log)) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before it could be interrupted: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "resumes with --run-id sig" in err

    done = _lines(log)
    assert len(done) >= 3 and [d["decision_point_idx"] for d in done] == list(range(len(done)))
    k = Kernel.open(db)
    try:
        (task,) = k.call("list_tasks", {}).tasks
        assert task.status == "cancelled" and task.resumable and task.progress.done == len(done)
    finally:
        k.close()

    again = tradegraph(*argv[3:])  # the same command, in process: what is under test here is the interrupted one
    assert again.returncode == 0, again.stderr
    total = json.loads(again.stdout)["decision_points"]
    logs = _lines(log)
    assert len(done) < total, "the interrupt stopped the run before its end"
    assert len(logs) == total and [d["decision_point_idx"] for d in logs] == list(range(total))
    assert logs[: len(done)] == done, "the resumed run kept the interrupted run's points as they were"


def test_a_second_sigint_stops_at_once_and_the_resumed_run_equals_an_uninterrupted_one(
    private_store, tmp_path, uninterrupted
):
    """Ctrl-C, then Ctrl-C again while the decision point under way is still deciding: exit 130 at once, no
    traceback, and the cut point never logged (before: a permanent `failed` point, once `executed_with_errors`
    shown only by result.json and DIVERGED under replay --verify). Resumed, it equals an uninterrupted run."""
    alone_dir, alone_verdicts = uninterrupted
    store, out = private_store, tmp_path / "exp"
    log = out / RUN_ID / "episode_log.jsonl"
    db = store.db()
    cut = None
    for attempt in range(1, 4):  # noqa: B007 - each resumes the last, one catches the cycle deciding; named below
        proc = store.popen(*backtest(out))
        if freeze_mid_cycle(proc, db, log, after=len(_lines(log)) + 1, before="EXECUTING") is None:
            pytest.fail(f"the run ended before it could be interrupted: {proc.communicate()}")
        interrupt(proc)  # pending while stopped: handled as it goes on
        os.kill(proc.pid, signal.SIGCONT)
        first = proc.stderr.readline()
        assert "Ctrl-C again stops at once" in first, first
        # the first Ctrl-C is being handled: freeze again, and strike while a cycle is still deciding
        os.kill(proc.pid, signal.SIGSTOP)
        logged, cycle = len(_lines(log)), under_way(db, log)
        if cycle is not None and not reached(db, cycle, "EXECUTING"):
            cut = cycle
            interrupt(proc)
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in first + err, first + err
        if cut is not None:
            break
    assert cut is not None, "no attempt caught a cycle still deciding after the first Ctrl-C"
    assert err.strip().splitlines() == ["tradegraph: interrupted"], err
    steps = _lines(log)
    assert len(steps) == logged and cut not in {s["agent_output"]["cycle_id"] for s in steps}
    assert {s["agent_output"]["cycle_status"] for s in steps} == {"completed"}

    spooled = store.spooled_ids()
    again = store.cli(*backtest(out))
    assert again.returncode == 0, again.stderr
    counts = compare_with_uninterrupted(out / RUN_ID, alone_dir)
    lost = len(spooled - stored_ids(db))
    assert lost == 0, "what the stopped cycle spooled is redelivered"
    assert superseded_cycles(db) == [cut], "the cycle the second Ctrl-C cut is marked superseded, once"
    verify_as_uninterrupted(store, cut, alone_verdicts)
    print(
        f"\ndouble SIGINT mid-cycle: injected=1, attempts={attempt}, spooled={len(spooled)}, events_lost={lost}, "
        + ", ".join(f"{k}={v}" for k, v in counts.items())
    )
