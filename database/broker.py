"""The broker's side of the store: each order's local record (`broker_orders`, one per client_order_id, written
before the submit), the kill switch (`broker_control`), and which sessions trade through a broker
(`broker_sessions`: a session is bound to the broker it started with)."""
from __future__ import annotations

import time
from typing import Any, Iterable, Optional

from pymongo import ASCENDING
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

ORDERS, CONTROL, SESSIONS = "broker_orders", "broker_control", "broker_sessions"


class BrokerOrders:
    def __init__(self, db: Database) -> None:
        self.col = db[ORDERS]

    def ensure_indexes(self) -> None:
        self.col.create_index([("session_id", ASCENDING), ("cycle_id", ASCENDING)])
        self.col.create_index([("day", ASCENDING)])

    def intend(self, doc: dict[str, Any]) -> Optional[dict[str, Any]]:
        """Record the intent to submit (`_id` = client_order_id). Returns the earlier record when there is one: a
        previous attempt (this process's, or a killed one's) may already have reached the broker."""
        try:
            self.col.insert_one({**doc, "state": "intent", "at": time.time()})
            return None
        except DuplicateKeyError:
            return self.col.find_one({"_id": doc["_id"]})

    def update(self, client_order_id: str, **fields: Any) -> None:
        self.col.update_one({"_id": client_order_id}, {"$set": {**fields, "updated": time.time()}})

    def of_cycle(self, cycle_id: str) -> list[dict[str, Any]]:
        return list(self.col.find({"cycle_id": cycle_id}).sort("leg", ASCENDING))

    def of_session(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        return list(self.col.find({} if session_id is None else {"session_id": session_id}))

    def count_day(self, day: str) -> int:
        return self.col.count_documents({"day": day})

    def get(self, client_order_id: str) -> Optional[dict[str, Any]]:
        return self.col.find_one({"_id": client_order_id})

    def update_many(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        for cid, fields in rows:
            self.update(cid, **fields)


class KillSwitch:
    """One document: while `halted`, no process submits an order and no approval resumes a broker cycle."""

    def __init__(self, db: Database) -> None:
        self.col = db[CONTROL]

    def state(self) -> dict[str, Any]:
        return self.col.find_one({"_id": "halt"}) or {"_id": "halt", "halted": False}

    def set(self, halted: bool, *, by: str, reason: str = "") -> dict[str, Any]:
        doc = {"halted": halted, "by": by, "at": time.time(), "reason": reason}
        self.col.update_one({"_id": "halt"}, {"$set": doc}, upsert=True)
        return {"_id": "halt", **doc}


class BrokerSessions:
    def __init__(self, db: Database) -> None:
        self.col = db[SESSIONS]

    def bind(self, session_id: str, broker: str, host: str) -> None:
        self.col.update_one({"_id": session_id}, {"$setOnInsert": {"broker": broker, "host": host,
                                                                   "at": time.time()}}, upsert=True)

    def broker_of(self, session_id: str) -> Optional[str]:
        doc = self.col.find_one({"_id": session_id})
        return doc["broker"] if doc else None
