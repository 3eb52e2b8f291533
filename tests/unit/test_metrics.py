"""agent.metrics against values computed by hand on tiny series."""

from __future__ import annotations

import math

import pytest

from agent import metrics as m

EQ = [100.0, 110.0, 99.0, 121.0]  # returns +10%, -10%, +22.2%
DATES = ["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-06"]
R = [0.1, -0.1, 2 / 9]
MEAN = sum(R) / 3
SD = math.sqrt(sum((r - MEAN) ** 2 for r in R) / 2)


def test_returns():
    assert m.period_returns(EQ) == pytest.approx(R)
    assert m.total_return(EQ) == pytest.approx(0.21)
    # 3 periods, 3 periods a year -> annualised == total
    assert m.annualised_return(EQ, periods_per_year=3) == pytest.approx(0.21)
    # 3 periods, 252 a year: 1.21 ** 84 - 1
    assert m.annualised_return(EQ) == pytest.approx(1.21**84 - 1)
    assert m.total_return([5.0]) == 0.0


def test_volatility_sharpe_sortino():
    assert SD == pytest.approx(0.162668, rel=1e-5)
    assert m.annualised_volatility(EQ, periods_per_year=1) == pytest.approx(SD)
    assert m.annualised_volatility(EQ) == pytest.approx(SD * math.sqrt(252))
    assert m.sharpe_ratio(EQ, periods_per_year=1) == pytest.approx(0.0740741 / 0.162668, rel=1e-5)
    assert m.sharpe_ratio(EQ, periods_per_year=252) == pytest.approx(MEAN / SD * math.sqrt(252))
    # rf 12%/yr on 12 periods/yr: 1% per period off every return; sd unchanged
    assert m.sharpe_ratio(EQ, rf=0.12, periods_per_year=12) == pytest.approx((MEAN - 0.01) / SD * math.sqrt(12))
    # downside deviation: sqrt((0 + 0.01 + 0) / 3)
    assert m.sortino_ratio(EQ, periods_per_year=1) == pytest.approx(MEAN / math.sqrt(0.01 / 3))
    assert m.sharpe_ratio([100.0, 100.0, 100.0]) is None  # zero volatility
    assert m.sortino_ratio([100.0, 101.0, 102.0]) is None  # no downside


def test_drawdown_and_calmar():
    dd = m.max_drawdown(EQ, DATES)
    assert dd["max_drawdown"] == pytest.approx(0.1)
    assert (dd["peak"], dd["trough"]) == ("2020-01-02", "2020-01-03")
    dd2 = m.max_drawdown([100, 80, 120, 60, 130], list("abcde"))
    assert dd2["max_drawdown"] == pytest.approx(0.5) and (dd2["peak"], dd2["trough"]) == ("c", "d")
    assert m.drawdown_series([100, 80, 120, 60]) == pytest.approx([0, 0.2, 0, 0.5])
    assert m.calmar_ratio(EQ, periods_per_year=3) == pytest.approx(2.1)
    assert m.calmar_ratio([1.0, 2.0, 3.0]) is None


TRADES = [
    {"symbol": "A", "side": "BUY", "quantity": 10, "price": 10.0, "fees": 1.0, "notional": 100.0},
    {
        "symbol": "A",
        "side": "SELL",
        "quantity": 5,
        "price": 12.0,
        "fees": 1.0,
        "notional": 60.0,
    },  # (12-10.1)*5-1 = +8.5
    {"symbol": "A", "side": "SELL", "quantity": 5, "price": 9.0, "fees": 0.0, "notional": 45.0},  # (9-10.1)*5 = -5.5
]


def test_trades():
    assert m.closed_trades(TRADES) == pytest.approx([8.5, -5.5])
    assert m.hit_rate(TRADES) == pytest.approx(0.5)
    assert m.hit_rate(TRADES[:1]) is None
    assert m.turnover(TRADES, EQ) == pytest.approx(205 / 107.5)


def test_summary_and_buy_and_hold():
    s = m.summarize(DATES, EQ, trades=TRADES, exposure=[0.0, 0.5, 0.5, 1.0], periods_per_year=3)
    assert s["num_trades"] == 3 and s["average_exposure"] == pytest.approx(0.5)
    assert s["calmar"] == pytest.approx(2.1) and s["max_drawdown_peak"] == "2020-01-02"
    assert s["final_equity"] == 121.0 and s["closed_trades"] == 2
    # 50 each: 5 shares of A at 10, 1 share of B at 50
    assert m.buy_and_hold_curve({"A": [10, 20, 10], "B": [50, 25, 100]}, 100.0) == pytest.approx([100, 125, 150])
