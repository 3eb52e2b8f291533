"""The backtest recovery faults' stores (tests/faults/backtest_runs.py) and the uninterrupted run they compare with,
run once per test session on a store of its own."""
from __future__ import annotations

import pytest

from tests.faults.backtest_runs import RUN_ID, SESSION, PrivateStore, backtest, verdicts


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """(run dir, {cycle: (verdict, states compared)} of its `replay --verify`) of the run never interrupted."""
    root = tmp_path_factory.mktemp("uninterrupted")
    store = PrivateStore(root)
    store.start()
    try:
        run = store.cli(*backtest(root / "exp"))
        assert run.returncode == 0, run.stderr
        verify = store.cli("replay", SESSION, "--verify")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        yield root / "exp" / RUN_ID, verdicts(verify.stdout)
    finally:
        store.stop()


@pytest.fixture
def private_store(tmp_path):
    """An embedded store of the test's own, started apart (so the test can kill and restart it), stopped after."""
    store = PrivateStore(tmp_path)
    store.start()
    try:
        yield store
    finally:
        store.stop()
