"""The deterministic risk engine (VALIDATING). No LLM, no forecast: its input type has no place for one."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from agent.config import RiskLimits
from schemas.decision import PortfolioDecision
from schemas.portfolio import PortfolioSnapshot
from schemas.validation import DecisionValidation, RiskCheck


@dataclass(frozen=True)
class RiskOrder:
    symbol: str
    side: str
    quantity: float
    direction: str
    entry: float
    stop: float
    target: float


@dataclass(frozen=True)
class RiskInput:
    """Everything risk may read. Deliberately no FeatureBundle and no forecast."""

    orders: tuple[RiskOrder, ...]
    portfolio: PortfolioSnapshot
    prices: Mapping[str, float]


def equity(portfolio: PortfolioSnapshot, prices: Mapping[str, float]) -> float:
    return portfolio.cash + sum(p.quantity * prices.get(s, p.avg_price) for s, p in portfolio.positions.items())


def size_position(capital: float, risk_per_trade_pct: float, entry: float, stop: float) -> int:
    """quantity = floor(capital × risk_per_trade_pct / 100 / |entry − stop|): a stop-out costs that % of capital."""
    distance = abs(entry - stop)
    if distance <= 0 or capital <= 0:
        return 0
    return math.floor(capital * risk_per_trade_pct / 100 / distance)


def risk_input(decision: PortfolioDecision, portfolio: PortfolioSnapshot, prices: Mapping[str, float]) -> RiskInput:
    theses = {t.symbol: t for t in decision.theses}
    orders = []
    for o in decision.orders:
        t = theses.get(o.symbol)
        if t is None:
            raise ValueError(f"order for {o.symbol} has no thesis behind it")
        orders.append(RiskOrder(o.symbol, o.side, o.quantity, t.direction, t.entry, t.stop, t.target))
    return RiskInput(tuple(orders), portfolio, dict(prices))


def evaluate(inp: RiskInput, limits: RiskLimits) -> DecisionValidation:
    eq = equity(inp.portfolio, inp.prices)
    checks: list[RiskCheck] = []
    sells = [o for o in inp.orders if o.side == "SELL"]
    buys = [o for o in inp.orders if o.side == "BUY"]
    sell_proceeds = sum(o.quantity * inp.prices[o.symbol] for o in sells)
    positions_after_sells = {s for s, p in inp.portfolio.positions.items()
                             if p.quantity - sum(o.quantity for o in sells if o.symbol == s) > 0}
    gross_after = sum(p.quantity * inp.prices.get(s, p.avg_price) for s, p in inp.portfolio.positions.items())
    gross_after += sum(o.quantity * inp.prices[o.symbol] * (1 if o.side == "BUY" else -1) for o in inp.orders)
    loss_today = max(0.0, -inp.portfolio.realized_pnl_today)
    cum_risk, cum_notional, open_count = loss_today, 0.0, len(positions_after_sells)

    def add(name, o, passed, value=None, limit=None, detail=""):
        checks.append(RiskCheck(name=name, symbol=o.symbol, passed=bool(passed),
                                value=None if value is None else round(value, 6),
                                limit=None if limit is None else round(limit, 6), detail=detail))

    for o in sells + buys:
        long = o.direction == "LONG"
        sane = (o.stop < o.entry < o.target) if long else (o.target < o.entry < o.stop)
        add("degenerate_thesis", o, sane, detail=f"{o.direction}: stop {o.stop}, entry {o.entry}, target {o.target}")
        add("size_nonzero", o, o.quantity >= 1 or (0 < o.quantity and o.side == "SELL"), o.quantity, 1,
            f"{o.side} {o.quantity:g} {o.symbol}")
        if o.side == "SELL":
            for name in ("daily_loss_cap", "margin_sufficient", "max_notional_pct", "max_positions"):
                add(name, o, True, detail="sell reduces exposure")
            continue
        notional = o.quantity * inp.prices[o.symbol]
        cum_risk += o.quantity * abs(o.entry - o.stop)
        cum_notional += notional
        cap = eq * limits.daily_loss_cap_pct / 100
        add("daily_loss_cap", o, cum_risk <= cap + 1e-9, cum_risk, cap,
            f"risk at stop {cum_risk:,.2f} incl. today's loss {loss_today:,.2f} vs cap {cap:,.2f}")
        available = inp.portfolio.cash + sell_proceeds
        add("margin_sufficient", o, cum_notional <= available + 1e-9, cum_notional, available,
            f"buy notional {cum_notional:,.2f} vs cash available {available:,.2f}")
        pct = notional / eq * 100 if eq > 0 else math.inf
        add("max_notional_pct", o, pct <= limits.max_notional_pct + 1e-9, pct, limits.max_notional_pct,
            f"notional {notional:,.2f} is {pct:.2f}% of equity {eq:,.2f}")
        new_position = o.symbol not in positions_after_sells
        add("max_positions", o, (open_count < limits.max_positions) or not new_position, open_count,
            limits.max_positions, f"{open_count} open position(s) before this order")
        if new_position:
            open_count += 1
    if inp.orders:
        exposure_pct = gross_after / eq * 100 if eq > 0 else math.inf
        checks.append(RiskCheck(name="exposure_cap", passed=exposure_pct <= limits.exposure_cap_pct + 1e-9,
                                value=round(exposure_pct, 6), limit=limits.exposure_cap_pct,
                                detail=f"gross exposure after the orders {exposure_pct:.2f}% of equity"))
    reasons = [f"{c.name}{' ' + c.symbol if c.symbol else ''}: {c.detail}" for c in checks if not c.passed]
    return DecisionValidation(passed=not reasons, checks=checks, reasons=reasons)
