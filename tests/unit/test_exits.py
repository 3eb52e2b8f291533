"""Positions close on their levels: gap fills at the open, touches at the level, the horizon at the close."""

import pandas as pd
import pytest

from agent.exits import apply_exits, bar_trigger, due_exits, outcome_of
from agent.markets import get_profile
from schemas.portfolio import PortfolioSnapshot, Position


def _pos(**kw):
    base = dict(
        symbol="AAPL",
        quantity=10,
        avg_price=100.0,
        opened="2012-03-01",
        stop=95.0,
        target=110.0,
        horizon_sessions=3,
        checked_through="2012-03-01",
    )
    return Position(**{**base, **kw})


def _bars(rows):
    idx = pd.to_datetime([r[0] for r in rows])
    return pd.DataFrame([r[1:] for r in rows], index=idx, columns=["open", "high", "low", "close", "volume"])


class Bar:
    def __init__(self, o, h, low, c):
        self.open, self.high, self.low, self.close = o, h, low, c


@pytest.mark.parametrize(
    "bar,held,expected",
    [
        (Bar(94, 96, 93, 95.5), 1, ("stop", 94)),  # gap down through the stop: the open
        (Bar(112, 113, 109, 111), 1, ("target", 112)),  # gap up through the target: the open
        (Bar(99, 101, 94.5, 100), 1, ("stop", 95.0)),  # touched: the level
        (Bar(101, 110.5, 100, 109), 1, ("target", 110.0)),
        (Bar(100, 111, 94, 105), 1, ("stop", 95.0)),  # both touched: the stop is assumed first
        (Bar(100, 101, 99, 100.5), 3, ("horizon", 100.5)),
        (Bar(100, 101, 99, 100.5), 2, None),
    ],
)
def test_bar_rules(bar, held, expected):
    assert bar_trigger(_pos(), bar, held) == expected


def test_due_exits_reads_only_bars_after_the_last_check_and_through_as_of():
    bars = _bars(
        [
            ("2012-03-01", 100, 120, 80, 100, 1),  # the opening day: already checked
            ("2012-03-02", 100, 101, 99, 100, 1),
            ("2012-03-05", 100, 101, 99, 100, 1),
            ("2012-03-06", 90, 91, 89, 90, 1),
        ]
    )  # after as_of: not seen
    book = PortfolioSnapshot(cash=0, positions={"AAPL": _pos(horizon_sessions=5)})
    triggers, checked = due_exits(book, {"AAPL": bars}, "2012-03-05")
    assert triggers == []
    assert checked.positions["AAPL"].sessions_held == 2
    assert checked.positions["AAPL"].checked_through == "2012-03-05"
    triggers, _ = due_exits(checked, {"AAPL": bars}, "2012-03-06")
    assert [(t.reason, t.date, t.price, t.sessions_held) for t in triggers] == [("stop", "2012-03-06", 90.0, 3)]


def test_horizon_counts_the_datas_own_bars():
    bars = _bars(
        [
            ("2012-03-02", 100, 101, 99, 101, 1),
            ("2012-03-05", 100, 101, 99, 102, 1),
            ("2012-03-06", 100, 101, 99, 103, 1),
        ]
    )
    book = PortfolioSnapshot(cash=0, positions={"AAPL": _pos()})
    triggers, _ = due_exits(book, {"AAPL": bars}, "2012-03-09")
    assert [(t.reason, t.date, t.price) for t in triggers] == [("horizon", "2012-03-06", 103.0)]


def test_position_without_levels_is_never_closed():
    bars = _bars([("2012-03-02", 1, 1, 1, 1, 1)])
    book = PortfolioSnapshot(cash=0, positions={"AAPL": Position(symbol="AAPL", quantity=1, avg_price=100)})
    assert due_exits(book, {"AAPL": bars}, "2012-03-09")[0] == []


def test_apply_exits_fills_through_the_broker_and_grounds_the_outcome():
    bars = _bars([("2012-03-02", 94, 96, 93, 95.5, 1)])
    book = PortfolioSnapshot(cash=1000.0, positions={"AAPL": _pos()})
    triggers, checked = due_exits(book, {"AAPL": bars}, "2012-03-02")
    closed, trades, after = apply_exits(
        checked, triggers, profile=get_profile("us_equity"), fees_bps=10, slippage_bps=0
    )
    assert "AAPL" not in after.positions
    assert trades[0].reason == "stop" and trades[0].price == 94.0 and trades[0].side == "SELL"
    fee = 94.0 * 10 * 10 / 1e4
    assert after.cash == pytest.approx(1000 + 940 - fee)
    assert closed[0].realized_pnl == pytest.approx((94 - 100) * 10 - fee)
    assert outcome_of(closed[0]) == ("loss", "Falsified")
    assert after.realized_pnl_today == pytest.approx(closed[0].realized_pnl)


def test_outcome_thresholds():
    from schemas.memory import ClosedTrade

    def ct(ret, pnl):
        return ClosedTrade(
            symbol="AAPL",
            quantity=1,
            opened="2012-03-01",
            closed="2012-03-02",
            entry_price=100,
            exit_price=100 + ret,
            reason="horizon",
            trigger_price=100 + ret,
            realized_pnl=pnl,
            return_pct=ret,
            sessions_held=1,
        )

    assert outcome_of(ct(0.4, 0.4)) == ("scratch", "Weakened")
    assert outcome_of(ct(2.0, 2.0)) == ("win", "Realized")
    assert outcome_of(ct(-0.6, -0.6)) == ("loss", "Falsified")
