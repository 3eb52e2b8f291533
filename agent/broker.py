"""The paper broker: all-or-nothing execution shared by standalone cycles and backtest episodes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Optional

from agent.markets import MarketProfile, bar_cutoff
from schemas.decision import Decision, DecisionResult, ExecutedTrade
from schemas.portfolio import PortfolioSnapshot, Position


def _lot_ok(qty: float, profile: MarketProfile) -> bool:
    return profile.fractional or (float(qty).is_integer() and int(qty) % profile.lot_size == 0)


def execute_decision(
    decision: Decision,
    *,
    universe: list[str],
    prices: Mapping[str, float],
    portfolio: PortfolioSnapshot,
    as_of: str,
    profile: MarketProfile,
    fees_bps: float = 0.0,
    slippage_bps: float = 0.0,
    prev_closes: Optional[Mapping[str, float]] = None,
) -> tuple[DecisionResult, PortfolioSnapshot]:
    """Every order must be valid or nothing executes; sells are applied before buys.

    Returns the result and the new portfolio (the old one, unchanged, when rejected).
    """
    reasons: list[str] = []
    if not profile.trades_weekends and date.fromisoformat(as_of).weekday() >= 5:
        reasons.append(f"{as_of} is not a trading day for {profile.name}")
    prev_closes = prev_closes or {}
    indexed = list(enumerate(decision.orders))
    ordered = [x for x in indexed if x[1].side == "SELL"] + [x for x in indexed if x[1].side == "BUY"]
    held = {s: p.quantity for s, p in portfolio.positions.items()}
    cash = portfolio.cash
    fills: list[tuple[int, object, float, float]] = []
    for i, o in ordered:
        tag = f"order {i} ({o.side} {o.quantity:g} {o.symbol})"
        if o.symbol not in universe:
            reasons.append(f"{tag}: ticker {o.symbol} not in the cycle's universe ({', '.join(universe)})")
            continue
        if o.quantity <= 0:
            reasons.append(f"{tag}: quantity must be above 0")
            continue
        if not _lot_ok(o.quantity, profile):
            unit = "whole shares" if profile.lot_size == 1 else f"lots of {profile.lot_size}"
            reasons.append(f"{tag}: quantity must be {unit} on {profile.name}")
            continue
        price = prices.get(o.symbol)
        if price is None or price <= 0:
            reasons.append(f"{tag}: no price for {o.symbol} on {as_of}")
            continue
        prev = prev_closes.get(o.symbol)
        if profile.price_limit_pct and prev:
            move = (price / prev - 1) * 100
            if o.side == "BUY" and move >= profile.price_limit_pct - 1e-9:
                reasons.append(f"{tag}: {o.symbol} is limit-up ({move:+.2f}%), no buy fills")
                continue
            if o.side == "SELL" and move <= -profile.price_limit_pct + 1e-9:
                reasons.append(f"{tag}: {o.symbol} is limit-down ({move:+.2f}%), no sell fills")
                continue
        slip = slippage_bps / 1e4
        fill = price * (1 + slip) if o.side == "BUY" else price * (1 - slip)
        notional = fill * o.quantity
        fee = notional * fees_bps / 1e4
        if o.side == "SELL":
            if held.get(o.symbol, 0) + 1e-12 < o.quantity:
                reasons.append(f"{tag}: holds {held.get(o.symbol, 0):g} {o.symbol}, cannot sell {o.quantity:g}")
                continue
            pos = portfolio.positions.get(o.symbol)
            if profile.t_plus_one and pos is not None and pos.opened == as_of:
                reasons.append(f"{tag}: T+1 — {o.symbol} bought on {as_of} cannot be sold the same day")
                continue
            held[o.symbol] -= o.quantity
            cash += notional - fee
        else:
            if notional + fee > cash + 1e-9:
                reasons.append(f"{tag}: needs {notional + fee:,.2f} cash, {cash:,.2f} available after sells")
                continue
            cash -= notional + fee
            held[o.symbol] = held.get(o.symbol, 0) + o.quantity
        fills.append((i, o, fill, fee))
    if reasons:
        return DecisionResult(status="rejected", message="; ".join(reasons)), portfolio
    return _apply(fills, portfolio, as_of, cash, str(bar_cutoff(profile, as_of).date()))


def _apply(
    fills, portfolio: PortfolioSnapshot, as_of: str, cash: float, seen_through: str
) -> tuple[DecisionResult, PortfolioSnapshot]:
    """`seen_through`: the last bar the filling decision read whole. A new position's levels are checked from the
    next bar on: at the close the bar after as_of, at the open as_of's own (it filled at that bar's open)."""
    positions = {s: p.model_copy() for s, p in portfolio.positions.items()}
    realized = portfolio.realized_pnl_today if portfolio.as_of == as_of else 0.0
    trades = []
    for i, o, fill, fee in fills:
        trades.append(
            ExecutedTrade(
                order_index=i,
                symbol=o.symbol,
                side=o.side,
                quantity=o.quantity,
                price=round(fill, 6),
                fees=round(fee, 6),
                notional=round(fill * o.quantity, 6),
                date=as_of,
                reason="signal" if o.side == "SELL" else None,
            )
        )
        pos = positions.get(o.symbol)
        if o.side == "BUY":
            if pos is None:
                # the order's bracket stays with the position: later bars are checked against it (agent/exits.py)
                positions[o.symbol] = Position(
                    symbol=o.symbol,
                    quantity=o.quantity,
                    avg_price=fill,
                    opened=as_of,
                    stop=o.stop,
                    target=o.target,
                    horizon_sessions=o.horizon_sessions,
                    conviction=o.conviction,
                    setup=list(o.setup),
                    checked_through=seen_through,
                )
            else:
                qty = pos.quantity + o.quantity
                avg = (pos.avg_price * pos.quantity + fill * o.quantity) / qty
                positions[o.symbol] = pos.model_copy(update={"quantity": qty, "avg_price": avg, "opened": as_of})
        else:
            assert pos is not None, o.symbol  # a sell was checked against the position it sells from
            realized += (fill - pos.avg_price) * o.quantity - fee
            left = pos.quantity - o.quantity
            if left <= 1e-12:
                positions.pop(o.symbol)
            else:
                positions[o.symbol] = pos.model_copy(update={"quantity": left})
    trades.sort(key=lambda t: t.order_index)
    after = PortfolioSnapshot(
        cash=round(cash, 6), positions=positions, as_of=as_of, realized_pnl_today=round(realized, 6)
    )
    return DecisionResult(status="accepted", message=f"{len(trades)} order(s) filled", executed_trades=trades), after
