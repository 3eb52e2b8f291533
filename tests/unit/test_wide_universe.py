"""Limits sized for the universe: a 20- and a 30-symbol offline cycle complete end to end (a 20-symbol StockBench
cycle once ended executed_with_errors: AgentMemory.tags took 20 items, and 20 symbols plus the status are 21)."""

from __future__ import annotations

import pytest

from agent.config import AgentConfig, RiskLimits
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from tests.helpers import mock_store
from tests.unit.synthetic_prices import write_prices

DAY = "2025-03-03"


@pytest.fixture(scope="module")
def thirty(tmp_path_factory):
    """An own-data prices CSV of 30 synthetic symbols, 290 sessions each."""
    symbols = [f"S{chr(65 + k // 26)}{chr(65 + k % 26)}" for k in range(30)]
    return write_prices(
        tmp_path_factory.mktemp("wide") / "prices.csv",
        symbols,
        "2024-01-02",
        "2025-03-31",
        seed=11,
        drift=0.0015,
        noise=0.012,
    )


@pytest.mark.parametrize("n,decide_at", [(20, "open"), (30, "close")])
def test_a_wide_cycle_completes(thirty, n, decide_at):
    symbols = thirty.universe()[:n]
    # limits loose enough that most symbols get a thesis and many an order: every per-symbol list grows
    risk = RiskLimits(max_positions=n, max_notional_pct=3.0, exposure_cap_pct=100.0)
    rt = default_services(AgentConfig(decide_at=decide_at, risk=risk), market=thirty)
    store = mock_store()
    out = run_state_machine(symbols, DAY, store=store, services=rt)
    assert out.status == "completed", out.error
    assert [p["symbol"] for p in out.contracts["ANALYZING"]["panels"]] == symbols
    decision = out.contracts["DECIDING"]
    assert len(decision["theses"]) >= n // 2 and len(decision["orders"]) >= 5
    memory = out.contracts["MEMORIZING"]
    assert set(symbols) <= set(memory["tags"]) and len(memory["tags"]) == n + 1
    assert len(out.contracts["EXECUTING"]["result"]["executed_trades"]) == len(decision["orders"])
