"""The deterministic risk engine, the all-or-nothing paper broker, and idempotent execution."""

import dataclasses

import pytest

from agent.broker import execute_decision
from agent.config import RiskLimits
from agent.markets import get_profile
from agent.risk import RiskInput, RiskOrder, evaluate, size_position
from graph.machine.runner import run_state_machine
from schemas.decision import Decision, Order
from schemas.portfolio import PortfolioSnapshot, Position
from tests.helpers import mock_store, services_with

LIMITS = RiskLimits(
    risk_per_trade_pct=1.0, daily_loss_cap_pct=2.0, max_notional_pct=25.0, max_positions=3, exposure_cap_pct=80.0
)


def test_sizing_formula():
    assert size_position(100_000, 1.0, 50.0, 48.0) == 500  # 1000 / 2
    assert size_position(100_000, 1.0, 50.0, 47.0) == 333  # floor(1000 / 3)
    assert size_position(100_000, 1.0, 50.0, 50.0) == 0


def buy(symbol="AAA", qty=100, entry=50.0, stop=48.0, target=54.0):
    return RiskOrder(symbol, "BUY", qty, "LONG", entry, stop, target)


def check(v, name, symbol="AAA"):
    return [c for c in v.checks if c.name == name and (c.symbol == symbol or name == "exposure_cap")][0]


def run(orders, cash=100_000.0, positions=None, realized=0.0, limits=LIMITS, prices=None):
    pf = PortfolioSnapshot(cash=cash, positions=positions or {}, realized_pnl_today=realized)
    prices = prices or {o.symbol: o.entry for o in orders}
    return evaluate(RiskInput(tuple(orders), pf, prices), limits)


def test_clean_order_passes_all_seven_checks():
    v = run([buy(qty=400)])
    assert v.passed and {c.name for c in v.checks} == {
        "degenerate_thesis",
        "size_nonzero",
        "daily_loss_cap",
        "margin_sufficient",
        "max_notional_pct",
        "max_positions",
        "exposure_cap",
    }


@pytest.mark.parametrize(
    "orders,kwargs,failing",
    [
        ([buy(stop=52.0)], {}, "degenerate_thesis"),
        ([buy(qty=0)], {}, "size_nonzero"),
        ([buy(qty=400, stop=40.0, target=70.0)], {}, "daily_loss_cap"),  # risk 4,000 > 2,000
        ([buy(qty=400)], {"realized": -1_500.0}, "daily_loss_cap"),  # 800 + 1,500 > 2,000
        ([buy(qty=400)], {"cash": 10_000.0}, "margin_sufficient"),
        ([buy(qty=600)], {}, "max_notional_pct"),  # 30% > 25%
        (
            [buy(qty=100)],
            {
                "positions": {s: Position(symbol=s, quantity=1, avg_price=1.0) for s in ("B", "C", "D")},
                "prices": {"AAA": 50.0, "B": 1.0, "C": 1.0, "D": 1.0},
            },
            "max_positions",
        ),
        (
            [buy(qty=410), buy("BBB", 410), buy("CCC", 410), buy("DDD", 410)],
            {"limits": dataclasses.replace(LIMITS, max_positions=9, daily_loss_cap_pct=9)},
            "exposure_cap",
        ),  # 80%+
    ],
)
def test_each_check_can_fail_and_one_failure_rejects(orders, kwargs, failing):
    v = run(orders, **kwargs)
    assert not v.passed
    failed = {c.name for c in v.checks if not c.passed}
    assert failing in failed
    assert any(r.startswith(failing) for r in v.reasons)


def test_checks_report_their_numbers():
    c = check(run([buy(qty=600)]), "max_notional_pct")
    assert (c.value, c.limit, c.passed) == (30.0, 25.0, False)


def test_risk_input_has_no_forecast():
    fields = {f.name for f in dataclasses.fields(RiskInput)} | {f.name for f in dataclasses.fields(RiskOrder)}
    assert not any("forecast" in f or "bundle" in f for f in fields)


# ------------------------------------------------------------------ broker
US = get_profile("us_equity")
PF = PortfolioSnapshot(cash=1_000.0, positions={"AAA": Position(symbol="AAA", quantity=5, avg_price=10.0)})


def test_all_or_nothing_rejection_names_every_reason():
    d = Decision(
        orders=[
            Order(symbol="AAA", side="SELL", quantity=10),
            Order(symbol="ZZZ", side="BUY", quantity=1),
            Order(symbol="BBB", side="BUY", quantity=0),
        ]
    )
    res, after = execute_decision(
        d, universe=["AAA", "BBB"], prices={"AAA": 10.0, "BBB": 20.0}, portfolio=PF, as_of="2012-06-01", profile=US
    )
    assert res.status == "rejected" and not res.executed_trades
    assert "cannot sell 10" in res.message and "ZZZ not in" in res.message and "quantity" in res.message
    assert after == PF


def test_sells_fill_before_buys_with_fees_and_slippage():
    d = Decision(orders=[Order(symbol="BBB", side="BUY", quantity=50), Order(symbol="AAA", side="SELL", quantity=5)])
    res, after = execute_decision(
        d,
        universe=["AAA", "BBB"],
        prices={"AAA": 10.0, "BBB": 20.0},
        portfolio=PF,
        as_of="2012-06-01",
        profile=US,
        fees_bps=10,
        slippage_bps=0,
    )
    # 50 × 20 = 1,000 + 1 fee needs the 49.95 from the sale: only possible because sells go first
    assert res.status == "accepted" and [t.order_index for t in res.executed_trades] == [0, 1]
    assert after.cash == pytest.approx(1_000 + 50 - 0.05 - 1_000 - 1.0)
    assert "AAA" not in after.positions and after.positions["BBB"].quantity == 50
    d2 = Decision(orders=[Order(symbol="BBB", side="BUY", quantity=50)])
    res2, _ = execute_decision(
        d2,
        universe=["AAA", "BBB"],
        prices={"AAA": 10.0, "BBB": 20.0},
        portfolio=PF,
        as_of="2012-06-01",
        profile=US,
        slippage_bps=100,
    )
    assert res2.status == "rejected" and "cash" in res2.message


# ------------------------------------------------------------------ idempotence and sessions
def test_executing_the_same_cycle_twice_never_fills_twice():
    from agent.config import AgentConfig
    from graph.machine.execution import PaperExecution

    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    assert out.contracts["EXECUTING"]["status"] == "filled"
    before = store.portfolios.load(out.session_id)
    backend = PaperExecution(store, AgentConfig())
    assert backend.record(out.cycle_id, out.session_id, out.contracts["EXECUTING"]) is False
    assert store.portfolios.load(out.session_id) == before
    assert backend.lookup(out.cycle_id) == out.contracts["EXECUTING"]


def test_two_cycle_session_carries_its_portfolio():
    store = mock_store()
    first = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    held = store.portfolios.load(first.session_id)
    assert held.positions and held.cash < 100_000
    second = run_state_machine(
        "AAPL,MSFT", "2012-07-02", store=store, session_id=first.session_id, services=services_with()
    )
    assert second.cycle_id == f"{first.session_id}:c2"
    # what carried over is the stored book, less what its levels closed in the bars between the two dates
    exits = (store.executions.get(f"{second.cycle_id}:exits") or {}).get("trades", [])
    closed = {t["symbol"] for t in exits}
    assert second.contracts["SCANNING"]["portfolio"]["cash"] == pytest.approx(
        held.cash + sum(t["notional"] - t["fees"] for t in exits)
    )
    assert set(second.contracts["SCANNING"]["portfolio"]["positions"]) == set(held.positions) - closed
    assert {e["symbol"] for e in second.contracts["SCANNING"]["exits"]} == closed
    assert closed, "2012-06-01 → 2012-07-02 is past the 10-session horizon: the levels must have closed something"
    # a held LONG is not bought again; one its levels closed may be
    still = set(held.positions) - closed
    assert all(not (o["side"] == "BUY" and o["symbol"] in still) for o in second.contracts["DECIDING"]["orders"])
