"""Simulation contracts, market-profile execution rules via the broker, and seed-004 decision extraction."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent.broker import execute_decision
from agent.markets import get_profile
from graph.machine.runner import CycleOutcome
from graph.services.backtest.loop import extract
from graph.services.backtest.simulation import SimulationExecution
from schemas.decision import Decision, Order
from schemas.portfolio import PortfolioSnapshot, Position
from schemas.simulation import Case, CaseMetadata, EpisodeConfig, PricePoint, StockData


def _case(**kw) -> Case:
    bars = [PricePoint(timestamp="2020-01-02", open=1, high=2, low=1, close=1.5, volume=10)]
    base = dict(
        case_id="ep:0",
        tickers=["AAPL"],
        stock_data={"AAPL": StockData(ticker="AAPL", current_price=1.5, daily_bars=bars)},
        portfolio=PortfolioSnapshot(cash=100.0),
        metadata=CaseMetadata(decision_point_idx=0, information_cutoff_timestamp="2020-01-02"),
    )
    base.update(kw)
    return Case(**base)


# ---------------------------------------------------------------- contracts
def test_case_for_agent_excludes_metadata():
    payload = _case().for_agent()
    assert "metadata" not in payload and "information_cutoff_timestamp" not in str(payload)
    assert payload["case_id"] == "ep:0" and payload["portfolio"]["cash"] == 100.0


def test_case_rejects_bad_id_extra_fields_and_future_bars():
    with pytest.raises(ValidationError):
        _case(case_id="no-index")
    with pytest.raises(ValidationError):
        Case.model_validate({**_case().model_dump(), "surprise": 1})
    late = [PricePoint(timestamp="2020-01-03", open=1, high=2, low=1, close=1.5, volume=10)]
    with pytest.raises(ValidationError, match="after the information cutoff"):
        _case(stock_data={"AAPL": StockData(ticker="AAPL", current_price=1.5, daily_bars=late)})


def test_episode_config_validation():
    with pytest.raises(ValidationError, match="after end"):
        EpisodeConfig(episode_id="e", tickers=["AAPL"], initial_cash=1, start="2012-01-01", end="2011-01-01")
    with pytest.raises(ValidationError):
        EpisodeConfig(episode_id="e", tickers=["AAPL"], initial_cash=-1, start="2011-01-01", end="2012-01-01")
    with pytest.raises(ValidationError):
        EpisodeConfig(
            episode_id="e", tickers=["AAPL"], initial_cash=1, start="2011-01-01", end="2012-01-01", fees_bps=-1
        )


# ---------------------------------------------------------------- market profiles through the broker
def _exec(market, orders, *, as_of="2021-01-05", prices=None, prev=None, portfolio=None, fees=0.0, slip=0.0):
    return execute_decision(
        Decision(orders=[Order(symbol=s, side=side, quantity=q) for s, side, q in orders]),
        universe=["AAA", "BTC-USD"],
        prices=prices or {"AAA": 10.0, "BTC-USD": 100.0},
        portfolio=portfolio or PortfolioSnapshot(cash=10_000.0),
        as_of=as_of,
        profile=get_profile(market),
        fees_bps=fees,
        slippage_bps=slip,
        prev_closes=prev,
    )


def test_us_equity_whole_shares_weekdays_only():
    assert _exec("us_equity", [("AAA", "BUY", 3)])[0].status == "accepted"
    res, _ = _exec("us_equity", [("AAA", "BUY", 1.5)])
    assert res.status == "rejected" and "whole shares" in res.message
    res, _ = _exec("us_equity", [("AAA", "BUY", 1)], as_of="2021-01-02")  # a Saturday
    assert res.status == "rejected" and "not a trading day" in res.message


def test_crypto_fractional_and_weekends():
    res, after = _exec("crypto", [("BTC-USD", "BUY", 0.25)], as_of="2021-01-02")
    assert res.status == "accepted" and after.positions["BTC-USD"].quantity == 0.25
    assert after.cash == pytest.approx(10_000 - 25)


def test_cn_a_share_lots_t_plus_one_and_price_limits():
    res, _ = _exec("cn_a_share", [("AAA", "BUY", 150)])
    assert res.status == "rejected" and "lots of 100" in res.message
    assert _exec("cn_a_share", [("AAA", "BUY", 200)])[0].status == "accepted"
    held = PortfolioSnapshot(
        cash=0.0, positions={"AAA": Position(symbol="AAA", quantity=100, avg_price=10.0, opened="2021-01-05")}
    )
    res, _ = _exec("cn_a_share", [("AAA", "SELL", 100)], portfolio=held)
    assert res.status == "rejected" and "T+1" in res.message
    assert _exec("cn_a_share", [("AAA", "SELL", 100)], portfolio=held, as_of="2021-01-06")[0].status == "accepted"
    res, _ = _exec("cn_a_share", [("AAA", "BUY", 100)], prices={"AAA": 11.0}, prev={"AAA": 10.0})
    assert res.status == "rejected" and "limit-up" in res.message
    res, _ = _exec(
        "cn_a_share",
        [("AAA", "SELL", 100)],
        prices={"AAA": 9.0},
        prev={"AAA": 10.0},
        portfolio=held,
        as_of="2021-01-06",
    )
    assert res.status == "rejected" and "limit-down" in res.message
    assert _exec("cn_a_share", [("AAA", "BUY", 100)], prices={"AAA": 10.9}, prev={"AAA": 10.0})[0].status == "accepted"


def test_all_or_nothing_names_every_reason():
    res, after = _exec("us_equity", [("AAA", "BUY", 1), ("ZZZ", "BUY", 1), ("AAA", "BUY", 0.5)])
    assert res.status == "rejected" and not res.executed_trades
    assert "ZZZ not in" in res.message and "whole shares" in res.message
    assert after.cash == 10_000.0 and not after.positions


def test_simulation_execution_uses_episode_fees_and_its_own_portfolio():
    sim = SimulationExecution.for_market(
        "us_equity", fees_bps=10, slippage_bps=100, portfolio=PortfolioSnapshot(cash=1_000.0)
    )
    res, after = sim.execute(
        Decision(orders=[Order(symbol="AAA", side="BUY", quantity=10)]),
        cycle_id="c1",
        session_id="s",
        universe=["AAA"],
        prices={"AAA": 10.0},
        prev_closes={},
        portfolio=PortfolioSnapshot(cash=5.0),
        as_of="2021-01-05",
    )
    fill = 10.0 * 1.01
    assert res.status == "accepted" and res.executed_trades[0].price == pytest.approx(fill)
    assert after.cash == pytest.approx(1_000 - fill * 10 * 1.001)
    assert sim.record("c1", "s", {"x": 1}) and not sim.record("c1", "s", {"x": 2}) and sim.lookup("c1") == {"x": 1}


# ---------------------------------------------------------------- seed 004 extraction
def _outcome(status="completed", contracts=None, error=None) -> CycleOutcome:
    return CycleOutcome(
        session_id="s", cycle_id="s:c1", status=status, contracts=contracts or {}, events=0, error=error
    )


def _submit(sim, orders, price=10.0):
    return sim.execute(
        Decision(orders=[Order(symbol="AAA", side="BUY", quantity=q) for q in orders]),
        cycle_id="s:c1",
        session_id="s",
        universe=["AAA"],
        prices={"AAA": price},
        prev_closes={},
        portfolio=sim.portfolio,
        as_of="2021-01-05",
    )


def test_extract_no_call_is_hold():
    p = PortfolioSnapshot(cash=100.0)
    sim = SimulationExecution.for_market("us_equity", fees_bps=0, slippage_bps=0, portfolio=p)
    action, decision, result, after, out = extract(_outcome(), sim, p)
    assert action == "hold" and decision.orders == [] and after == p and out["submit_calls"] == 0
    assert "no submit_decision call" in result.message


def test_extract_several_calls_uses_last():
    p = PortfolioSnapshot(cash=100.0)
    sim = SimulationExecution.for_market("us_equity", fees_bps=0, slippage_bps=0, portfolio=p)
    _submit(sim, [1])
    _submit(sim, [3])
    action, decision, result, after, out = extract(_outcome(), sim, p)
    assert action == "trade" and decision.orders[0].quantity == 3 and after.positions["AAA"].quantity == 3
    assert out["submit_calls"] == 2


def test_extract_rejected_is_hold_with_every_reason():
    p = PortfolioSnapshot(cash=100.0)
    sim = SimulationExecution.for_market("us_equity", fees_bps=0, slippage_bps=0, portfolio=p)
    _submit(sim, [1.5, 50])
    action, decision, result, after, _ = extract(_outcome(), sim, p)
    assert action == "rejected" and after == p and result.status == "rejected"
    assert "whole shares" in result.message and "cash" in result.message
    # a decision VALIDATING refused never reaches submit_decision: still a hold naming the reasons
    sim2 = SimulationExecution.for_market("us_equity", fees_bps=0, slippage_bps=0, portfolio=p)
    val = {"passed": False, "reasons": ["max_notional_pct AAA: too big", "exposure_cap: 90%"], "checks": []}
    dec = {"orders": [{"symbol": "AAA", "side": "BUY", "quantity": 9}], "rationale": "x", "theses": []}
    action, decision, result, after, _ = extract(_outcome("rejected", {"VALIDATING": val, "DECIDING": dec}), sim2, p)
    assert action == "rejected" and decision.orders[0].quantity == 9 and after == p
    assert "max_notional_pct AAA" in result.message and "exposure_cap" in result.message
