"""The backtest recovery faults' stores (tests/faults/backtest_runs.py) and the uninterrupted run they compare with,
run once per test session on a store of its own (once for every xdist worker together: the others wait for it)."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from database.embedded import stop_server
from tests.faults.backtest_runs import RUN_ID, SESSION, PrivateStore, backtest, verdicts
from tests.helpers import cli_here

# a test's timeout (pytest-timeout) covers its fixtures' set-up too: the first test to ask for `uninterrupted`
# pays for a whole backtest and its verify (135 s under a full run's load) before its own run (160 s), which
# broke the suite's 300 s with nothing hung. Such a test's budget says so.
UNINTERRUPTED_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "uninterrupted" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNINTERRUPTED_TIMEOUT_S))


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """(run dir, {cycle: (verdict, states compared)} of its `replay --verify`) of the run never interrupted.

    Made once per test session: under xdist every worker's base temp dir sits in one folder of the run, and the
    first worker to get there makes the run under a lock while any other waits and then reads it (two workers each
    making it cost a whole backtest more). Only files are shared: its store is stopped once it is made."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "uninterrupted"
    done = root / "verdicts.json"
    with open(shared / "uninterrupted.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            root.mkdir(exist_ok=True)
            store = PrivateStore(root)
            store.start()
            try:  # in process: the reference run's process is not what any test checks (~5 s of imports saved)
                run = cli_here(backtest(root / "exp"), store.settings())
                assert run.returncode == 0, run.stderr
                verify = cli_here(["replay", SESSION, "--verify"], store.settings())
                assert verify.returncode == 0, verify.stdout + verify.stderr
            finally:
                store.stop()
            done.write_text(json.dumps(verdicts(verify.stdout)))
    return root / "exp" / RUN_ID, {c: tuple(v) for c, v in json.loads(done.read_text()).items()}


@pytest.fixture
def private_store(tmp_path):
    """An embedded store of the test's own, started apart (so the test can kill and restart it), stopped after."""
    store = PrivateStore(tmp_path)
    store.start()
    try:
        yield store
    finally:
        # in process: what `tradegraph store stop` does, without an interpreter's start in every teardown (a test
        # that stops the store as its fault does it through the command, store.stop())
        stop_server(store.home)
