"""Reproducible by default: a run's result depends on its inputs and its own session, not on other runs in the
store. `make run`'s cycle gives the same contracts on a fresh store and after an unrelated backtest wrote notes on
the same symbols; recalling other runs' notes is asked for (`memory: on`), and the manifest records which."""

from __future__ import annotations

import json
import uuid

import pytest

from graph.kernel.core import Kernel

MAKE_RUN = {"symbols": ["AAPL", "MSFT"], "as_of": "2012-06-01"}  # the Makefile's SYMBOLS and AS_OF


def _contracts(out) -> str:
    """The cycle's contracts with its own ids taken out: what two runs of the same inputs must agree on."""
    return json.dumps(out.contracts, sort_keys=True).replace(out.session_id, "<session>")


def _memory_mode(kernel, out) -> str:
    (manifest,) = [
        e for e in kernel.store.events.read(out.session_id, kind="manifest") if e["cycle_id"] == out.cycle_id
    ]
    return manifest["payload"]["config"]["memory"]


@pytest.fixture
def kernel(tmp_path):
    k = Kernel.open(f"mongomock://rd_{uuid.uuid4().hex[:10]}", experiments_dir=tmp_path / "experiments")
    try:
        yield k
    finally:
        k.close()


def test_the_same_run_gives_the_same_contracts_before_and_after_an_unrelated_backtest(kernel):
    fresh = kernel.call("run_cycle", MAKE_RUN, transport="cli")
    assert fresh.status == "completed" and _memory_mode(kernel, fresh) == "session"
    # an unrelated backtest on the same symbols, ending before the run's date: its reviews and notes are all
    # known before 2012-06-01, so a recall of every run's notes would find them
    task = kernel.call(
        "start_backtest",
        {"symbols": ["AAPL", "MSFT"], "start": "2012-05-01", "end": "2012-05-31", "every": 3},
        transport="cli",
    )
    kernel.tasks.join(task.task_id)
    assert kernel.call("task_status", {"task_id": task.task_id}).status == "succeeded"
    notes = kernel.store.memories.col.count_documents({"symbol": {"$in": ["AAPL", "MSFT"]}, "kind": "review"})
    assert notes > 0, "the backtest closed no trade: there is nothing it could have changed"

    again = kernel.call("run_cycle", MAKE_RUN, transport="cli")
    assert again.session_id != fresh.session_id and _memory_mode(kernel, again) == "session"
    assert _contracts(again) == _contracts(fresh)

    # the control: asked to recall every run's notes, the same cycle reads the backtest's and decides otherwise,
    # so the equality above is the default's doing, not a backtest that changed nothing
    recalled = kernel.call("run_cycle", {**MAKE_RUN, "memory": "on"}, transport="cli")
    assert _memory_mode(kernel, recalled) == "on"
    assert any(not hit["memory_id"].startswith(recalled.session_id) for n in recalled.notes for hit in n["hits"])
    assert _contracts(recalled) != _contracts(fresh)
