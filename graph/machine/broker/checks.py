"""What is checked before the first submit of a broker cycle: the kill switch, the account, the clock, each asset
(tradable, fractionable, shortable), buying power, and the mandate against the broker's own positions. Each failed
check is a refusal naming its rule, limit and value; any refusal means nothing is submitted. `broker` is
agent/brokers/alpaca.py AlpacaBroker (duck-typed: this module runs without the SDK installed)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from datetime import UTC, datetime
from typing import Any, Optional

from agent.brokers.mandate import NEW_YORK, Mandate, Refusal
from agent.brokers.orders import BrokerRejected, BrokerUnavailable
from schemas.decision import Order
from schemas.execution import ExecutionStatus
from schemas.portfolio import PortfolioSnapshot


def ny_day(now: Optional[datetime] = None) -> str:
    return (now or datetime.now(UTC)).astimezone(NEW_YORK).date().isoformat()


def halted(state: Mapping[str, Any]) -> Optional[Refusal]:
    if not state.get("halted"):
        return None
    at = datetime.fromtimestamp(float(state.get("at") or 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Refusal("kill_switch", "not halted", f"halted by {state.get('by')} at {at}")


def presubmit(
    broker: Any,
    mandate: Mandate,
    orders: Sequence[Order],
    prices: Mapping[str, float],
    portfolio: PortfolioSnapshot,
    orders_today: Callable[[], int],
    pool: Executor,
) -> list[Refusal]:
    """`orders_today` is a store read: asked beside the broker's answers, not before them, on `pool` (threads.py)."""
    try:
        return _presubmit(broker, mandate, orders, prices, portfolio, orders_today, pool)
    except (BrokerRejected, BrokerUnavailable) as e:  # fail closed: no answer is not a yes
        return [Refusal("broker_reachable", "an answer", str(e))]


def _presubmit(
    broker: Any,
    mandate: Mandate,
    orders: Sequence[Order],
    prices: Mapping[str, float],
    portfolio: PortfolioSnapshot,
    orders_today: Callable[[], int],
    pool: Executor,
) -> list[Refusal]:
    out: list[Refusal] = []
    # every answer the checks need, asked at once: they depend on none of each other, and a 20-symbol cycle would
    # otherwise wait for 23 round trips in a row before its first order
    asked_account, asked_clock = pool.submit(broker.account), pool.submit(broker.clock)
    asked_positions, asked_today = pool.submit(broker.positions), pool.submit(orders_today)
    asked_assets = {s: pool.submit(broker.asset, s) for s in dict.fromkeys(o.symbol for o in orders)}
    account, clock, broker_positions = asked_account.result(), asked_clock.result(), asked_positions.result()
    assets = {s: f.result() for s, f in asked_assets.items()}
    status = str(getattr(account.status, "value", account.status))
    if status != "ACTIVE" or account.trading_blocked or account.account_blocked:
        out.append(Refusal("account_active", "ACTIVE and not blocked", status))
    if not clock.is_open:
        out.append(Refusal("market_open", "open", f"closed until {clock.next_open.isoformat()}"))
    held = {s: p.quantity for s, p in portfolio.positions.items()}
    for o in orders:
        asset = assets[o.symbol]
        if not asset.tradable:
            out.append(Refusal("asset_tradable", True, False, o.symbol))
        if not float(o.quantity).is_integer() and not asset.fractionable:
            out.append(Refusal("asset_fractionable", True, o.quantity, o.symbol))
        if o.side == "SELL" and o.quantity > held.get(o.symbol, 0.0) + 1e-9:
            # the book is long only: a sell beyond the held quantity would open a short
            out.append(
                Refusal(
                    "asset_shortable" if not asset.shortable else "long_only",
                    held.get(o.symbol, 0.0),
                    o.quantity,
                    o.symbol,
                )
            )
    buys = round(sum(o.quantity * prices.get(o.symbol, 0.0) for o in orders if o.side == "BUY"), 2)
    power = float(account.buying_power or 0)
    if buys > power:
        out.append(Refusal("buying_power", power, buys))
    positions = {s: q for s, (q, _) in broker_positions.items()}
    out += mandate.check(
        [(o.symbol, o.side, o.quantity) for o in orders],
        prices,
        positions,
        orders_today=asked_today.result(),
        now=clock.timestamp,
    )
    return out


def cycle_status(res: Any) -> ExecutionStatus:
    """EXECUTING's contract status of a broker cycle (a DecisionResult with `orders`): filled only when every
    order filled whole; rejected only when nothing filled and nothing is left open or unknown at the broker."""
    rows = res.orders or []
    if rows and all(r.status == "filled" for r in rows):
        return "filled"
    if any(r.filled_quantity > 0 or r.status not in ("not_submitted", "rejected", "canceled") for r in rows):
        return "partial"
    return "rejected"
