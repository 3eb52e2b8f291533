"""The uninterrupted run the backtest recovery faults compare with (tests/faults/backtest_runs.py): run once per
test session, on a store of its own."""
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
