"""The deterministic risk engine (VALIDATING). No LLM, no forecast: its input type has no place for one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

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
    """Everything risk may read. Deliberately no FeatureBundle and no forecast.
    `prices` must mark every symbol traded or held; `as_of` is the decision day (the day's realised
    loss counts only on the day it was realised)."""

    orders: tuple[RiskOrder, ...]
    portfolio: PortfolioSnapshot
    prices: Mapping[str, float]
    as_of: str | None = None


class MissingPrice(ValueError):
    """A held or traded symbol has no price: valuing it at cost would misstate equity."""


def equity(portfolio: PortfolioSnapshot, prices: Mapping[str, float]) -> float:
    missing = sorted(s for s in portfolio.positions if s not in prices)
    if missing:
        raise MissingPrice(f"no current price for held position(s) {', '.join(missing)}: cannot value the book")
    return portfolio.cash + sum(p.quantity * prices[s] for s, p in portfolio.positions.items())


def size_position(capital: float, risk_per_trade_pct: float, entry: float, stop: float) -> int:
    """quantity = floor(capital × risk_per_trade_pct / 100 / |entry − stop|): a stop-out costs that % of capital."""
    distance = abs(entry - stop)
    if distance <= 0 or capital <= 0:
        return 0
    return math.floor(capital * risk_per_trade_pct / 100 / distance)


def risk_input(
    decision: PortfolioDecision, portfolio: PortfolioSnapshot, prices: Mapping[str, float], as_of: str | None = None
) -> RiskInput:
    theses = {t.symbol: t for t in decision.theses}
    orders = []
    for o in decision.orders:
        t = theses.get(o.symbol)
        if t is None:
            raise ValueError(f"order for {o.symbol} has no thesis behind it")
        orders.append(RiskOrder(o.symbol, o.side, o.quantity, t.direction, t.entry, t.stop, t.target))
    return RiskInput(tuple(orders), portfolio, dict(prices), as_of)


def loss_today(portfolio: PortfolioSnapshot, as_of: str | None) -> float:
    """The realised loss that counts against today's cap: only if it was realised on `as_of`."""
    if as_of is not None and portfolio.as_of is not None and portfolio.as_of != as_of:
        return 0.0
    return max(0.0, -portfolio.realized_pnl_today)


def evaluate(inp: RiskInput, limits: RiskLimits) -> DecisionValidation:
    """Checks the decision as a whole: each limit is applied to the book after all its orders (per-symbol
    position after every order for that symbol, open positions, cumulative risk and cash, gross exposure),
    so splitting a position over several orders cannot slip past a cap."""
    eq = equity(inp.portfolio, inp.prices)
    checks: list[RiskCheck] = []
    sells = [o for o in inp.orders if o.side == "SELL"]
    buys = [o for o in inp.orders if o.side == "BUY"]
    sell_proceeds = sum(o.quantity * inp.prices[o.symbol] for o in sells)
    held_after_sells = {
        s: p.quantity - sum(o.quantity for o in sells if o.symbol == s) for s, p in inp.portfolio.positions.items()
    }
    open_symbols = {s for s, q in held_after_sells.items() if q > 0}
    gross_after = sum(p.quantity * inp.prices[s] for s, p in inp.portfolio.positions.items())
    gross_after += sum(o.quantity * inp.prices[o.symbol] * (1 if o.side == "BUY" else -1) for o in inp.orders)
    lost = loss_today(inp.portfolio, inp.as_of)
    cum_risk, cum_notional = lost, 0.0
    position_value = {s: max(q, 0.0) * inp.prices[s] for s, q in held_after_sells.items()}

    def add(name, o, passed, value=None, limit=None, detail=""):
        checks.append(
            RiskCheck(
                name=name,
                symbol=o.symbol,
                passed=bool(passed),
                value=None if value is None else round(value, 6),
                limit=None if limit is None else round(limit, 6),
                detail=detail,
            )
        )

    for o in sells + buys:
        long = o.direction == "LONG"
        sane = (o.stop < o.entry < o.target) if long else (o.target < o.entry < o.stop)
        add("degenerate_thesis", o, sane, detail=f"{o.direction}: stop {o.stop}, entry {o.entry}, target {o.target}")
        add(
            "size_nonzero",
            o,
            o.quantity >= 1 or (0 < o.quantity and o.side == "SELL"),
            o.quantity,
            1,
            f"{o.side} {o.quantity:g} {o.symbol}",
        )
        if o.side == "SELL":
            for name in ("daily_loss_cap", "margin_sufficient", "max_notional_pct", "max_positions"):
                add(name, o, True, detail="sell reduces exposure")
            continue
        notional = o.quantity * inp.prices[o.symbol]
        cum_risk += o.quantity * abs(o.entry - o.stop)
        cum_notional += notional
        cap = eq * limits.daily_loss_cap_pct / 100
        add(
            "daily_loss_cap",
            o,
            cum_risk <= cap + 1e-9,
            cum_risk,
            cap,
            f"risk at stop {cum_risk:,.2f} incl. today's loss {lost:,.2f} {_vs(cum_risk, cap)} cap {cap:,.2f}",
        )
        available = inp.portfolio.cash + sell_proceeds
        add(
            "margin_sufficient",
            o,
            cum_notional <= available + 1e-9,
            cum_notional,
            available,
            f"buy notional {cum_notional:,.2f} {_vs(cum_notional, available)} cash available {available:,.2f}",
        )
        position_value[o.symbol] = position_value.get(o.symbol, 0.0) + notional
        pct = position_value[o.symbol] / eq * 100 if eq > 0 else math.inf
        add(
            "max_notional_pct",
            o,
            pct <= limits.max_notional_pct + 1e-9,
            pct,
            limits.max_notional_pct,
            f"{o.symbol} position after this order {position_value[o.symbol]:,.2f} is {pct:.4f}% of equity "
            f"{eq:,.2f}, {_vs(pct, limits.max_notional_pct)} the {limits.max_notional_pct:g}% cap",
        )
        new_position = o.symbol not in open_symbols
        open_symbols.add(o.symbol)
        add(
            "max_positions",
            o,
            len(open_symbols) <= limits.max_positions,
            len(open_symbols) - new_position,
            limits.max_positions,
            f"{len(open_symbols)} open position(s) after this order, limit {limits.max_positions}",
        )
    if inp.orders:
        exposure_pct = gross_after / eq * 100 if eq > 0 else math.inf
        checks.append(
            RiskCheck(
                name="exposure_cap",
                passed=exposure_pct <= limits.exposure_cap_pct + 1e-9,
                value=round(exposure_pct, 6),
                limit=limits.exposure_cap_pct,
                detail=f"gross exposure after the orders {exposure_pct:.4f}% of equity, "
                f"{_vs(exposure_pct, limits.exposure_cap_pct)} the "
                f"{limits.exposure_cap_pct:g}% cap",
            )
        )
    reasons = [f"{c.name}{' ' + c.symbol if c.symbol else ''}: {c.detail}" for c in checks if not c.passed]
    return DecisionValidation(passed=not reasons, checks=checks, reasons=reasons)


def _vs(value: float, limit: float) -> str:
    return "exceeds" if value > limit + 1e-9 else "within"
