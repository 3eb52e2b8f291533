"""The embedded store's server SIGKILLed while a foreground `tradegraph backtest` is mid-cycle: one line and exit 3,
no traceback; the cut-off decision point is not logged; after the server is restarted, the same command resumes
at that point (the cut-off cycle superseded, its spooled events redelivered first) and ends as an uninterrupted
run of the same config: the same trade_history.json bytes, the same equity at every point, and `replay --verify`
identical, the superseded cycle verified as far as it recorded."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.faults.backtest_runs import (
    RUN_ID,
    SESSION,
    TASK_INPUT,
    backtest,
    compare_with_uninterrupted,
    freeze_mid_cycle,
    lines,
    stored_ids,
    superseded_cycles,
    verify_as_uninterrupted,
)

pytestmark = pytest.mark.integration

FIGURES: dict[str, int] = {}


def test_a_store_killed_mid_backtest_gives_one_line_and_the_resumed_run_equals_an_uninterrupted_one(
    private_store, tmp_path, uninterrupted
):
    alone_dir, alone_verdicts = uninterrupted
    store, out = private_store, tmp_path / "exp"
    log = out / RUN_ID / "episode_log.jsonl"
    proc = store.popen(*backtest(out))
    db = store.db()
    cut = freeze_mid_cycle(proc, db, log, after=3)
    assert cut is not None, f"the run ended before a cycle could be cut: {proc.communicate()}"
    logged_before = len(lines(log))
    store.kill()
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=300)

    # one line, exit 3, naming how to go on; no traceback from the task thread on a closed client
    assert proc.returncode == 3, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tradegraph: error: "), err
    assert "Traceback" not in err and f"--run-id {RUN_ID}" in err
    # the cut-off point is not logged as a decision (before: a `failed` point that resuming never re-ran)
    steps = lines(log)
    assert len(steps) == logged_before and cut not in {s["agent_output"]["cycle_id"] for s in steps}
    assert {s["agent_output"]["cycle_status"] for s in steps} == {"completed"}
    spooled = store.spooled_ids()
    assert spooled, "the cut cycle's events that the dead store could not take wait in the spool"

    store.start()  # a new server, on a port of its own
    again = store.cli(*backtest(out))
    assert again.returncode == 0, again.stderr
    counts = compare_with_uninterrupted(out / RUN_ID, alone_dir)
    db = store.db()
    lost = len(spooled - stored_ids(db))
    assert lost == 0 and not store.spooled_ids(), "every spooled event is in the store"
    # the spool went in first, so the superseding follows all of the old cycle
    assert superseded_cycles(db) == [cut], "the cut-off cycle is marked superseded, once"
    marker = db.state_events.find_one({"session_id": SESSION, "payload.type": "cycle_superseded"})["seq"]
    assert marker == max(e["seq"] for e in db.state_events.find({"session_id": SESSION, "cycle_id": cut}))
    verify_as_uninterrupted(store, cut, alone_verdicts)
    FIGURES.update(injected=1, spooled=len(spooled), events_lost=lost, **counts)


def test_a_task_thread_whose_store_dies_ends_resumable_without_a_crash(
    private_store, tmp_path, monkeypatch, uninterrupted
):
    """In one process, as under `serve`: the store's server SIGKILLed under a running backtest task, and nobody
    stopping the thread. It ends on its own, and its final status can't be written to a dead store: no exception
    escapes the thread (before: `Cannot use MongoClient after close` / a timeout, a traceback), the task reads
    `interrupted`, resumable. With the server back on a new port, the same store object reconnects and the
    resumed task ends as the uninterrupted run."""
    from graph.kernel.core import Kernel

    alone_dir, _ = uninterrupted
    store = private_store
    for name, value in store.env.items():
        if name.startswith("TRADEGRAPH_"):
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("MONGODB_URI", raising=False)
    escaped: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    k = Kernel.open(None, experiments_dir=tmp_path / "exp")
    try:
        task = k.call("start_backtest", TASK_INPUT)
        log = tmp_path / "exp" / RUN_ID / "episode_log.jsonl"
        deadline = time.monotonic() + 300
        while len(lines(log)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        store.kill()
        k.tasks.join(task.task_id, timeout_s=300)
        assert not escaped, f"an exception escaped the task thread: {escaped!r}"
        logged = lines(log)
        assert {s["agent_output"]["cycle_status"] for s in logged} == {"completed"} and len(logged) < 10

        store.start()
        assert k.store.reconnect(k.store.generation), "the store moved to the new server"
        stopped = k.call("task_status", {"task_id": task.task_id})
        assert stopped.status in ("interrupted", "failed") and stopped.resumable, stopped
        k.call("resume_task", {"task_id": task.task_id})
        k.tasks.join(task.task_id, timeout_s=600)
        assert k.call("task_status", {"task_id": task.task_id}).status == "succeeded"
        assert not escaped, escaped
        compare_with_uninterrupted(tmp_path / "exp" / RUN_ID, alone_dir)
        FIGURES["task thread crashes"] = len(escaped)
    finally:
        k.close()


def teardown_module(module) -> None:
    if FIGURES:
        print("\nstore SIGKILLed mid-backtest: " + ", ".join(f"{k}={v}" for k, v in FIGURES.items()))
