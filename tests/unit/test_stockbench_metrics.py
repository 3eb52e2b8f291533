"""StockBench's metrics, computed by hand on small series (its stockbench/backtest/metrics.py `evaluate`)."""

import math

import pytest

from agent.metrics import equal_weight_buy_and_hold, nav_returns, stockbench_metrics


def test_metrics_match_a_hand_computed_series():
    equity = [100_000.0, 101_000.0, 99_990.0, 100_989.9, 98_970.102]
    m = stockbench_metrics(equity, initial_cash=100_000.0)
    rets = [0.0, 0.01, -0.01, 0.01, -0.02]  # the first day's return is 0, and counts
    assert nav_returns(equity) == pytest.approx(rets)
    mean = sum(rets) / 5
    neg = [-0.01, -0.02]
    neg_sd = math.sqrt(sum((x - sum(neg) / 2) ** 2 for x in neg) / 1)  # sample std of the negative days only
    assert m["sortino"] == pytest.approx(mean / neg_sd)
    assert m["cumulative_return"] == pytest.approx(98_970.102 / 100_000 - 1)
    # the deepest fall from the running peak (101,000) to the last point
    assert m["max_drawdown"] == pytest.approx(98_970.102 / 101_000 - 1)
    sd = math.sqrt(sum((r - mean) ** 2 for r in rets) / 4)
    assert m["sharpe"] == pytest.approx(mean * 252 / (sd * math.sqrt(252)))


def test_sortino_is_zero_with_fewer_than_two_losing_days_and_the_base_is_the_starting_cash():
    # one losing day: a sample std is undefined, StockBench reports 0
    m = stockbench_metrics([100.0, 102.0, 101.0, 103.0], initial_cash=100.0)
    assert m["sortino"] == 0.0
    # a run's return is against the cash it started with, the baseline's against its first point
    assert stockbench_metrics([99.0, 110.0], initial_cash=100.0)["cumulative_return"] == pytest.approx(0.10)
    assert stockbench_metrics([99.0, 110.0])["cumulative_return"] == pytest.approx(110 / 99 - 1)
    # the running peak starts at the first point: a run that only falls from 99 has drawdown 99 -> 90
    assert stockbench_metrics([99.0, 90.0], initial_cash=100.0)["max_drawdown"] == pytest.approx(90 / 99 - 1)


def test_the_baseline_buys_equal_dollars_once_with_its_entry_cost():
    curve = equal_weight_buy_and_hold({"A": [10.0, 11.0, 12.0], "B": [20.0, 18.0, 20.0]}, 1000.0, entry_cost_bps=3)
    per = 500 / 1.0003
    assert curve == pytest.approx([per * 2, per * (1.1 + 0.9), per * (1.2 + 1.0)])
    assert equal_weight_buy_and_hold({}, 1000.0) == []
