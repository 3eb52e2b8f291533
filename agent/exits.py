"""Positions close on their levels: each bar since the last check is read against the stop, the target and
the horizon, in date order, before the cycle decides anything.

Rules for a long position (the paper book is long-only), per bar:
- a gap through a level fills at the open (open <= stop: stop; open >= target: target);
- otherwise a touched level fills at the level; when one bar touches both, the stop is assumed first
  (the daily bar does not say which came first, and the worse fill is the honest assumption);
- otherwise, once the position has been held `horizon_sessions` bars, it exits at that bar's close.
The fill itself is the paper broker's (slippage and fees), so an exit is an execution like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import pandas as pd

from agent.broker import execute_decision
from agent.markets import MarketProfile
from schemas.base import ExitReason
from schemas.decision import Decision, ExecutedTrade, Order
from schemas.memory import ClosedTrade
from schemas.portfolio import PortfolioSnapshot, Position

# a return within ±0.5% of the entry is a scratch: neither the thesis nor its opposite was shown
SCRATCH_PCT = 0.5


class ExitTrigger(NamedTuple):
    symbol: str
    reason: ExitReason
    date: str
    price: float
    sessions_held: int


def bar_trigger(pos: Position, bar, held: int) -> tuple[ExitReason, float] | None:
    """(reason, trigger price) for one daily bar, or None while the position stays open."""
    o, h, low, c = float(bar.open), float(bar.high), float(bar.low), float(bar.close)
    if pos.stop is not None and o <= pos.stop:
        return "stop", o
    if pos.target is not None and o >= pos.target:
        return "target", o
    if pos.stop is not None and low <= pos.stop:
        return "stop", pos.stop
    if pos.target is not None and h >= pos.target:
        return "target", pos.target
    if pos.horizon_sessions is not None and held >= pos.horizon_sessions:
        return "horizon", c
    return None


def due_exits(
    portfolio: PortfolioSnapshot, bars: Mapping[str, pd.DataFrame], as_of: str
) -> tuple[list[ExitTrigger], PortfolioSnapshot]:
    """The exits the bars after each position's last check (through `as_of`) trigger, and the portfolio
    with the positions that stay open marked as checked through their last bar."""
    triggers, positions = [], dict(portfolio.positions)
    for sym in sorted(portfolio.positions):
        pos = portfolio.positions[sym]
        if pos.stop is None and pos.target is None and pos.horizon_sessions is None:
            continue  # opened without a thesis (an older book): nothing to check against
        frame = bars.get(sym)
        if frame is None or frame.empty:
            continue
        since = pd.Timestamp(pos.checked_through or pos.opened or "1900-01-01")
        window = frame[(frame.index > since) & (frame.index <= pd.Timestamp(as_of))]
        held, last = pos.sessions_held, None
        for ts, bar in zip(window.index, window.itertuples()):
            held += 1
            last = ts.strftime("%Y-%m-%d")
            hit = bar_trigger(pos, bar, held)
            if hit is not None:
                triggers.append(ExitTrigger(sym, hit[0], last, round(hit[1], 6), held))
                break
        else:
            if last is not None:
                positions[sym] = pos.model_copy(update={"sessions_held": held, "checked_through": last})
    return triggers, portfolio.model_copy(update={"positions": positions})


def apply_exits(
    portfolio: PortfolioSnapshot,
    triggers: list[ExitTrigger],
    *,
    profile: MarketProfile,
    fees_bps: float,
    slippage_bps: float,
) -> tuple[list[ClosedTrade], list[ExecutedTrade], PortfolioSnapshot]:
    """Fill each trigger through the paper broker, in date order; a fill the broker refuses is an error
    (the book would otherwise keep a position its own stop closed)."""
    closed, trades = [], []
    for trig in sorted(triggers, key=lambda t: (t.date, t.symbol)):
        pos = portfolio.positions[trig.symbol]
        order = Order(symbol=trig.symbol, side="SELL", quantity=pos.quantity)
        result, after = execute_decision(
            Decision(orders=[order]),
            universe=[trig.symbol],
            prices={trig.symbol: trig.price},
            portfolio=portfolio,
            as_of=trig.date,
            profile=profile,
            fees_bps=fees_bps,
            slippage_bps=slippage_bps,
        )
        if result.status != "accepted":
            raise ValueError(
                f"{trig.reason} exit of {trig.symbol} on {trig.date} at {trig.price} could not fill: {result.message}"
            )
        trade = result.executed_trades[0].model_copy(update={"reason": trig.reason})
        trades.append(trade)
        closed.append(closed_trade(pos, trade, trig.reason, trig.price, trig.sessions_held))
        portfolio = after
    return closed, trades, portfolio


def closed_trade(pos: Position, trade: ExecutedTrade, reason: ExitReason, trigger: float, held: int) -> ClosedTrade:
    pnl = (trade.price - pos.avg_price) * trade.quantity - trade.fees
    return ClosedTrade(
        symbol=pos.symbol,
        quantity=trade.quantity,
        opened=pos.opened or trade.date,
        closed=trade.date,
        entry_price=round(pos.avg_price, 6),
        exit_price=trade.price,
        reason=reason,
        trigger_price=trigger,
        realized_pnl=round(pnl, 6),
        return_pct=round(pnl / (pos.avg_price * trade.quantity) * 100, 4),
        sessions_held=held,
        stop=pos.stop,
        target=pos.target,
        horizon_sessions=pos.horizon_sessions,
        conviction=pos.conviction,
        setup=list(pos.setup),
    )


def outcome_of(trade: ClosedTrade) -> tuple[str, str]:
    """(outcome, signal evolution), from the numbers only: win → Realized, loss → Falsified, scratch → Weakened."""
    if abs(trade.return_pct) < SCRATCH_PCT:
        return "scratch", "Weakened"
    return ("win", "Realized") if trade.realized_pnl > 0 else ("loss", "Falsified")
