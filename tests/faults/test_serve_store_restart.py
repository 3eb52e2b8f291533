"""`tradegraph serve` outliving its embedded store's server, each fault injected for real on a running server:
- `tradegraph store stop` + `store start` (a new port): the next request succeeds (before: 503 until restarted);
- the store's server SIGKILLed and started again on a new port: the next request succeeds;
- the server SIGKILLed while a backtest task is mid-cycle: the task ends failed (or reads interrupted), resumable,
  with no traceback in the server's log (before: `Cannot use MongoClient after close` from the task thread); once
  the store is back, resuming it re-runs the cut-off point and the run equals an uninterrupted one."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.faults.backtest_runs import (
    RUN_ID,
    TASK_INPUT,
    PrivateStore,
    compare_with_uninterrupted,
    freeze_mid_cycle,
    superseded_cycles,
    verify_as_uninterrupted,
)
from tests.kernel import local_http
from tests.kernel.servers import REPO, free_port, serve

pytestmark = pytest.mark.integration

FIGURES: dict[str, int] = {}


def _restart_elsewhere(store: PrivateStore, kill: bool) -> int:
    """Stop (or SIGKILL) the store's server and start it again on another port than it had."""
    before = store.port()
    for _ in range(3):  # the OS picks the free port: it may hand back the same one
        store.kill() if kill else store.stop()
        if store.start() != before:
            return store.port()
    raise AssertionError(f"the store came back on port {before} three times")


def _task(base: str, task_id: str) -> dict:
    r = local_http.get(f"{base}/tasks/{task_id}", timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _until(base: str, task_id: str, statuses: tuple[str, ...], timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = _task(base, task_id)
        if view["status"] in statuses:
            return view
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} not {statuses} after {timeout_s}s: {view}")


def test_serve_reconnects_to_a_store_back_on_a_new_port_and_its_cut_task_resumes_to_the_uninterrupted_run(
    private_store, tmp_path, uninterrupted
):
    alone_dir, alone_verdicts = uninterrupted
    store, port = private_store, free_port()
    base = f"http://127.0.0.1:{port}"
    with serve(
        ["serve", "--port", str(port)],
        {**store.env, "PYTHONPATH": str(REPO), "TRADEGRAPH_RUNS_DIR": str(tmp_path / "experiments")},
        tmp_path,
        f"{base}/store",
    ) as server:
        assert local_http.get(f"{base}/sessions", timeout=60).status_code == 200
        after_restart = []  # the status of the first request after each restart
        for kill in (False, True):  # `store stop` + `store start`; then SIGKILL + `store start`
            _restart_elsewhere(store, kill)
            after_restart.append(local_http.get(f"{base}/sessions", timeout=60).status_code)

        r = local_http.post(f"{base}/backtests", json=TASK_INPUT, timeout=60)
        assert r.status_code in (200, 201, 202), r.text
        task_id = r.json()["task_id"]
        run_dir = tmp_path / "experiments" / RUN_ID
        cut = freeze_mid_cycle(server, store.db(), run_dir / "episode_log.jsonl", after=3)
        assert cut is not None, "the task ended before a cycle could be cut"
        _restart_elsewhere(store, kill=True)  # while the server is frozen mid-cycle
        os.kill(server.pid, signal.SIGCONT)
        after_restart.append(local_http.get(f"{base}/tasks/{task_id}", timeout=60).status_code)
        failed_first = sum(s != 200 for s in after_restart)
        assert failed_first == 0, after_restart

        ended = _until(base, task_id, ("failed", "interrupted", "succeeded", "cancelled"))
        assert ended["status"] in ("failed", "interrupted") and ended["resumable"], ended
        assert ended["progress"]["done"] < ended["progress"]["total"]
        assert local_http.post(f"{base}/tasks/{task_id}/resume", timeout=60).status_code in (200, 202)
        done = _until(base, task_id, ("succeeded", "failed", "cancelled", "interrupted"))
        assert done["status"] == "succeeded", done
        log = next(tmp_path.glob("server-*.log")).read_text()
        assert "Traceback" not in log and "after close" not in log, log[-3000:]

    counts = compare_with_uninterrupted(run_dir, alone_dir)
    db = store.db()
    assert superseded_cycles(db) == [cut]
    assert not store.spooled_ids(), "what the cut cycle spooled is redelivered"
    verify_as_uninterrupted(store, cut, alone_verdicts)
    FIGURES.update(
        store_restarts=len(after_restart),
        failed_first_requests=failed_first,
        cycles_cut=len(superseded_cycles(db)),
        **counts,
    )


@pytest.mark.slow
def test_keyed_requests_reconnect_too(private_store, tmp_path):
    """Issue 28, hole 12: after `store stop` + `store start` on a new port, a POST with an Idempotency-Key is the first
    request: it must succeed (before: 503 until some unkeyed request had run), and its retry gets the same answer."""
    store, port = private_store, free_port()
    base = f"http://127.0.0.1:{port}"
    cycle = {"symbols": ["AAPL", "MSFT"], "as_of": "2012-06-01", "memory": "off"}
    with serve(["serve", "--port", str(port)], {**store.env, "PYTHONPATH": str(REPO)}, tmp_path, f"{base}/store"):
        first = local_http.post(
            f"{base}/cycles", json=cycle, headers={"Idempotency-Key": "before-restart"}, timeout=120
        )
        assert first.status_code == 200, first.text
        codes = []
        for kill in (False, True):
            _restart_elsewhere(store, kill)
            key = f"after-restart-{kill}"
            r = local_http.post(f"{base}/cycles", json=cycle, headers={"Idempotency-Key": key}, timeout=120)
            codes.append(r.status_code)
            assert r.status_code == 200, r.text
            again = local_http.post(f"{base}/cycles", json=cycle, headers={"Idempotency-Key": key}, timeout=120)
            assert again.status_code == 200 and again.json()["session_id"] == r.json()["session_id"], again.text
    FIGURES.update(keyed_first_requests_after_restart=len(codes), keyed_failed=sum(c != 200 for c in codes))


def teardown_module(module) -> None:
    if FIGURES:
        print("\nserve under a store restarted on a new port: " + ", ".join(f"{k}={v}" for k, v in FIGURES.items()))
