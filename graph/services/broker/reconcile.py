"""`broker status` and `broker reconcile [SESSION]`: the broker's orders, positions and cash against tradegraph's
own records. An order whose state moved on after its cycle ended (a partial fill completed, an open order filled
or expired) is recorded as a late `order_update` in its cycle's log, and its fill enters the session's book through
the same outbox as any fill (keyed by order and filled quantity, so a second reconcile changes nothing); what
cannot be explained is listed as drift."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

from agent.broker import _apply
from database.broker import BrokerOrders, BrokerSessions, KillSwitch
from database.connection import Store
from database.portfolio import commit_fill
from graph.services.broker.control import CONTROL_SESSION
from schemas.decision import Order
from schemas.events import new_event
from schemas.portfolio import PortfolioSnapshot


def status(broker: Any, store: Store) -> dict[str, Any]:
    account = broker.account()
    return {
        "account": {
            "status": str(getattr(account.status, "value", account.status)),
            "cash": float(account.cash),
            "buying_power": float(account.buying_power),
            "equity": float(account.equity or 0),
        },
        "positions": {s: {"quantity": q, "avg_price": p} for s, (q, p) in broker.positions().items()},
        "open_orders": [o.as_dict() for o in broker.orders(status="open")],
        "halt": {k: v for k, v in KillSwitch(store.db).state().items() if k != "_id"},
    }


def reconcile(broker: Any, store: Store, session_id: Optional[str] = None) -> dict[str, Any]:
    ledger = BrokerOrders(store.db)
    local = ledger.of_session(session_id)
    remote = {o.client_order_id: o for o in broker.orders(status="all")}
    updated, drift = [], []
    late: dict[str, list[dict[str, Any]]] = {}
    for doc in sorted(local, key=lambda d: (d["session_id"], d["cycle_id"], d["leg"])):
        cid, r = doc["_id"], remote.get(doc["_id"])
        if r is None:
            if doc.get("broker_order_id"):
                drift.append(
                    {
                        "client_order_id": cid,
                        "symbol": doc["symbol"],
                        "problem": f"acknowledged order {doc['broker_order_id']} is not at the broker",
                    }
                )
            continue  # never reached the broker (refused, halted before its submit): nothing to reconcile
        before = (doc.get("status"), float(doc.get("filled_quantity") or 0))
        if before == (r.status, r.filled_qty):
            continue
        row = {
            "client_order_id": cid,
            "broker_order_id": r.id,
            "symbol": r.symbol,
            "status": r.status,
            "filled_quantity": r.filled_qty,
            "avg_price": r.filled_avg_price,
            "late": True,
        }
        late.setdefault(doc["cycle_id"], []).append(
            {
                **row,
                "session_id": doc["session_id"],
                "leg": doc["leg"],
                "side": doc["side"],
                "was": before,
                "was_avg": doc.get("avg_price"),
            }
        )
        updated.append(row)
    with store.writer(background=False) as writer:
        for cycle_id, rows in late.items():
            for row in rows:
                writer.put(
                    new_event(
                        row["session_id"],
                        cycle_id,
                        "BROKER",
                        "order_update",
                        {
                            k: row[k]
                            for k in (
                                "client_order_id",
                                "broker_order_id",
                                "symbol",
                                "status",
                                "filled_quantity",
                                "avg_price",
                                "late",
                            )
                        },
                    )
                )
    rows = [row for rs in late.values() for row in rs]  # the events first, then the books and the local records
    for sid in sorted({row["session_id"] for row in rows}):
        _book_late_fills(store, sid, [row for row in rows if row["session_id"] == sid])
    for sid in sorted({row["session_id"] for row in rows}):
        ledger.set_state(
            sid,
            {
                row["client_order_id"]: {
                    "status": row["status"],
                    "filled_quantity": row["filled_quantity"],
                    "avg_price": row["avg_price"],
                    "broker_order_id": row["broker_order_id"],
                    "state": "acked",
                }
                for row in rows
                if row["session_id"] == sid
            },
        )
    drift += _position_drift(broker, store, session_id)
    report = {"broker": broker.name, "orders": len(local), "updated": updated, "drift": drift, "clean": not drift}
    target = session_id or CONTROL_SESSION
    cycles = store.events.cycle_ids(target) if session_id else []
    cycle_id = cycles[-1] if cycles else f"{CONTROL_SESSION}:c{store.events.next_cycle(CONTROL_SESSION)}"
    with store.writer(background=False) as writer:
        writer.put(new_event(target, cycle_id, "BROKER", "reconciliation", report))
    return report


def _book_late_fills(store: Store, session_id: str, rows: list[dict[str, Any]]) -> None:
    """What filled since each order was last seen enters the session's book in one outbox entry, keyed by what it
    books (a second reconcile finds nothing new, and the same entry is never booked twice)."""
    fills, portfolio_cash = [], 0.0
    for row in rows:
        was_qty, was_avg = row["was"][1], float(row["was_avg"] or 0)
        delta = row["filled_quantity"] - was_qty
        if delta <= 1e-12 or not row["avg_price"]:
            continue
        price = (row["avg_price"] * row["filled_quantity"] - was_avg * was_qty) / delta
        fills.append((row["leg"], Order(symbol=row["symbol"], side=row["side"], quantity=delta), price, 0.0))
        portfolio_cash += (-1 if row["side"] == "BUY" else 1) * delta * price
    if not fills:
        return
    portfolio, version = store.portfolios.load_versioned(session_id)
    portfolio = portfolio or PortfolioSnapshot(cash=0.0)
    as_of = portfolio.as_of or "1970-01-01"
    res, after = _apply(fills, portfolio, as_of, portfolio.cash + portfolio_cash, as_of)
    key = (
        "late:"
        + hashlib.sha256(
            json.dumps(sorted((r["client_order_id"], r["filled_quantity"]) for r in rows)).encode()
        ).hexdigest()[:24]
    )
    commit_fill(
        store.portfolios,
        store.executions,
        f"{session_id}:{key}",
        session_id,
        {
            "kind": "late_fills",
            "trades": [t.model_dump(mode="json") for t in res.executed_trades],
            "portfolio_after": after.model_dump(mode="json"),
        },
        version or 0,
    )


def _position_drift(broker: Any, store: Store, session_id: Optional[str]) -> list[dict[str, Any]]:
    """The broker's positions against the books of every session trading through it (one account holds them all);
    cash too when a single session trades there."""
    sessions = [d["_id"] for d in BrokerSessions(store.db).col.find({"broker": broker.name})]
    books = [b for b in (store.portfolios.load(s) for s in sessions) if b is not None]
    mine: dict[str, float] = {}
    for b in books:
        for s, p in b.positions.items():
            mine[s] = mine.get(s, 0.0) + p.quantity
    theirs = {s: q for s, (q, _) in broker.positions().items()}
    drift = [
        {"symbol": s, "problem": f"broker holds {theirs.get(s, 0.0):g}, the ledger {mine.get(s, 0.0):g}"}
        for s in sorted(set(mine) | set(theirs))
        if abs(theirs.get(s, 0.0) - mine.get(s, 0.0)) > 1e-6
    ]
    if len(books) == 1:
        cash = float(broker.account().cash)
        if abs(cash - books[0].cash) > 0.01:
            drift.append({"symbol": None, "problem": f"broker cash {cash:,.2f}, the ledger {books[0].cash:,.2f}"})
    return drift
