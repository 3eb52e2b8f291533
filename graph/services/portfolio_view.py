"""A session's book as a trader reads it: the stored snapshot valued at its as-of, P&L from the committed fills.

The stored portfolio is the truth for positions and cash; the ledger's committed entries (exits and fills, in
the order they filled) give the realised side. Realised P&L is worked out by average cost, the broker's own
rule, with every fee charged to it, so realised + unrealised = equity − starting cash exactly; a test holds the
view to that identity.

A session that decided at the close recorded each held symbol's close at its as-of in its last scan: the book is
valued on those, and the price file (pandas, seconds of start-up) is read only when the recording does not value it
(a session deciding at the open, whose scan holds opening prices; a recording without a held symbol's price).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

from database.connection import Store
from schemas.events import ContractEvent, ManifestEvent, parse_event
from schemas.market import MarketScan
from schemas.portfolio import PortfolioSnapshot, PortfolioView, PositionView

if TYPE_CHECKING:  # agent.data.market imports pandas: loaded only when a price file is read
    from agent.data.market import MarketData


class NoPortfolio(LookupError):
    """The session never stored a book (unknown, or a backtest whose book lives in its run folder)."""


def committed_trades(entries: Iterable[dict]) -> list[dict]:
    """The trades of committed ledger entries, in fill order: a cycle's exits (`kind: exits`) or its fills."""
    trades: list[dict] = []
    for entry in entries:
        result = entry.get("result") or {}
        if result.get("kind") == "exits":
            trades += result.get("trades") or []
        else:
            trades += (result.get("result") or {}).get("executed_trades") or []
    return trades


def committed_dividends(entries: Iterable[dict]) -> float:
    """The cash dividends credited before decisions (carried by a cycle's `kind: exits` entry): realised income."""
    return sum(float(d["amount"]) for e in entries for d in (e.get("result") or {}).get("dividends") or [])


def realized_by_average_cost(trades: Iterable[dict]) -> tuple[float, float]:
    """(realised P&L net of every fee, fees paid). A sell realises (price − average cost) × quantity."""
    held: dict[str, tuple[float, float]] = {}  # symbol -> (quantity, average cost)
    realized = fees = 0.0
    for t in trades:
        qty, price, fee = float(t["quantity"]), float(t["price"]), float(t.get("fees") or 0.0)
        fees += fee
        realized -= fee
        q, avg = held.get(t["symbol"], (0.0, 0.0))
        if t["side"] == "BUY":
            held[t["symbol"]] = (q + qty, (q * avg + qty * price) / (q + qty))
        else:
            realized += (price - avg) * qty
            left = q - qty
            held[t["symbol"]] = (left, avg) if left > 1e-9 else (0.0, 0.0)
    return realized, fees


def starting_cash(store: Store, session_id: str) -> Optional[float]:
    """The cash the session began with: its first cycle's recorded configuration."""
    for event in store.events.read(session_id, kind="manifest"):
        manifest = parse_event(event)
        cash = manifest.payload.config.get("starting_cash") if isinstance(manifest, ManifestEvent) else None
        if cash is not None:
            return float(cash)
    return None


def last_as_of(store: Store, session_id: str) -> Optional[str]:
    """The date the session's last recorded cycle ran for (its manifest's inputs)."""
    manifests = [parse_event(e) for e in store.events.read(session_id, kind="manifest")]
    dates = [(m.payload.inputs or {}).get("as_of") for m in manifests if isinstance(m, ManifestEvent)]
    return next((d for d in reversed(dates) if d), None)


def last_scan(store: Store, session_id: str, as_of: Optional[str]) -> Optional[tuple[MarketScan, str]]:
    """The session's last scan dated `as_of` and the cycle that made it (contracts read from the newest back)."""
    for event in reversed(store.events.read(session_id, kind="contract")):
        contract = parse_event(event)
        if isinstance(contract, ContractEvent) and contract.payload.name == "MarketScan":
            scan = MarketScan.model_validate(contract.payload.data)
            if scan.as_of == as_of:
                return scan, contract.cycle_id
    return None


def recorded_prices(store: Store, session_id: str, as_of: Optional[str]) -> dict[str, tuple[float, str]]:
    """symbol -> (price, its date) as the session's last scan dated `as_of` saw them, held symbols outside its
    universe included (MarketScan.marks; one with no bar that day at the last close its untradable entry dates)."""
    found = last_scan(store, session_id, as_of)
    return {} if found is None else scan_prices(found[0])


def scan_prices(scan: MarketScan) -> dict[str, tuple[float, str]]:
    dated = {u.symbol: u.price_date for u in scan.untradable if u.price_date}
    return {
        **{sym: (price, dated.get(sym, scan.as_of)) for sym, price in scan.marks.items()},
        **{s.symbol: (s.price, s.last_bar_date) for s in scan.snapshots},
    }


def recorded_closes(store: Store, session_id: str) -> Optional[dict[str, tuple[float, str]]]:
    """The closes that value the session's stored book, as its last scan at the book's as-of recorded them, or None
    when the recording does not hold them: that scan's cycle decided at the open (its prices are opens), or a held
    symbol has no price in it. A book with no position needs none (an empty table)."""
    snapshot = store.portfolios.load(session_id)
    if snapshot is None or not snapshot.positions:
        return {}
    found = last_scan(store, session_id, snapshot.as_of)
    if found is None:
        return None
    scan, cycle_id = found
    manifests = [parse_event(e) for e in store.events.read(session_id, kind="manifest", cycle_id=cycle_id)]
    decided_at = next((m.payload.config.get("decide_at") for m in manifests if isinstance(m, ManifestEvent)), None)
    prices = scan_prices(scan)
    if decided_at != "close" or not set(snapshot.positions) <= set(prices):
        return None
    return prices


def _price(
    symbol: str, market: Optional[MarketData], recorded: dict[str, tuple[float, str]], as_of: Optional[str]
) -> tuple[Optional[float], Optional[str]]:
    """(price, its date): the close at as_of in the session's market data, or, without it, the recorded price."""
    if as_of is None:
        return None, None
    if market is None:
        return recorded.get(symbol, (None, None))
    from agent.data.market import DataError

    try:
        bars = market.as_of(symbol, as_of, lookback=1)
    except DataError:
        bars = None
    if bars is not None and len(bars):
        return float(bars["close"].iloc[-1]), bars.index[-1].strftime("%Y-%m-%d")
    return None, None


def _valued(pos, price: Optional[float], price_date: Optional[str]) -> PositionView:
    value = None if price is None else pos.quantity * price
    pnl = None if price is None else (price - pos.avg_price) * pos.quantity
    return PositionView(
        symbol=pos.symbol,
        quantity=pos.quantity,
        avg_price=pos.avg_price,
        price=price,
        price_date=price_date,
        market_value=value,
        unrealized_pnl=pnl,
        unrealized_pct=None if price is None else (price / pos.avg_price - 1) * 100,
        stop=pos.stop,
        target=pos.target,
        opened=pos.opened,
        age_sessions=pos.sessions_held,
        horizon_sessions=pos.horizon_sessions,
    )


def portfolio_view(store: Store, session_id: str, market: Optional[MarketData]) -> PortfolioView:
    """The book valued on `market` (the session's own data), or, when None (the recording holds the closes that
    value it, recorded_closes; or its price file moved or went away), on the prices its recording holds. A session that never filled (paused for approval, rejected, held) has no
    stored book: its cash is its starting cash, at its last cycle's date."""
    snapshot, version = store.portfolios.load_versioned(session_id)
    if snapshot is None:
        start = starting_cash(store, session_id)
        if start is None:  # neither a book nor a recorded configuration: nothing to show
            raise NoPortfolio(session_id)
        snapshot = PortfolioSnapshot(cash=start, as_of=last_as_of(store, session_id))
    recorded = recorded_prices(store, session_id, snapshot.as_of) if market is None and snapshot.positions else {}
    entries = store.executions.committed(session_id)
    trades = committed_trades(entries)
    realized, fees = realized_by_average_cost(trades)
    realized += committed_dividends(entries)
    start = starting_cash(store, session_id)
    if start is None:  # a session recorded before manifests: the cash its committed fills started from, exactly
        start = cash_before_fills(snapshot, trades)
    positions = [_valued(p, *_price(p.symbol, market, recorded, snapshot.as_of)) for p in snapshot.positions.values()]
    values = [p.market_value for p in positions if p.market_value is not None]
    pnls = [p.unrealized_pnl for p in positions if p.unrealized_pnl is not None]
    priced = len(values) == len(positions)  # every position has a price: else no equity rather than a partial one
    equity = snapshot.cash + sum(values) if priced else None
    unrealized = sum(pnls) if priced else None
    return PortfolioView(
        session_id=session_id,
        as_of=snapshot.as_of,
        version=version,
        starting_cash=start,
        cash=snapshot.cash,
        positions=positions,
        equity=equity,
        realized_pnl=realized,
        unrealized_pnl=unrealized,
        total_pnl=None if equity is None else equity - start,
        fees_paid=fees,
        fills=len(trades),
    )


def cash_before_fills(snapshot: PortfolioSnapshot, trades: list[dict[str, Any]]) -> float:
    """The cash before every committed fill: today's cash with each fill's cash flow and fee undone."""
    cash = snapshot.cash
    for t in trades:
        flow = float(t["quantity"]) * float(t["price"])
        cash += (flow if t["side"] == "BUY" else -flow) + float(t.get("fees") or 0.0)
    return cash
