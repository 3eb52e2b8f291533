"""The broker's side of the store: each order's intent (`broker_orders`, one per client_order_id, written before the
submit) and its latest known state (`broker_order_states`, one document per session), the kill switch (`broker_control`), and which sessions trade through a broker
(`broker_sessions`: a session is bound to the broker it started with)."""

from __future__ import annotations

import time
from typing import Any, Optional

from pymongo import ASCENDING
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

ORDERS, STATES, CONTROL, SESSIONS = "broker_orders", "broker_order_states", "broker_control", "broker_sessions"


class BrokerOrders:
    def __init__(self, db: Database) -> None:
        self.col = db[ORDERS]
        self.states = db[STATES]

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

    def intend_all(self, docs: list[dict[str, Any]]) -> dict[str, Optional[dict[str, Any]]]:
        """intend() for a cycle's every order in one round trip (and one more when some were recorded before)."""
        from pymongo.errors import BulkWriteError

        now = time.time()
        try:
            self.col.insert_many([{**d, "state": "intent", "at": now} for d in docs], ordered=False)
            return {d["_id"]: None for d in docs}
        except BulkWriteError:
            pass
        earlier = {d["_id"]: d for d in self.col.find({"_id": {"$in": [d["_id"] for d in docs]}}) if d.get("at") != now}
        return {d["_id"]: earlier.get(d["_id"]) for d in docs}

    def set_state(self, session_id: str, states: dict[str, dict[str, Any]]) -> None:
        """Orders' latest known states (acknowledged, filled, rejected, …), a whole cycle's in one round trip: kept
        beside the intents, in one document per session, as dotted fields merged into what was known."""
        if states:
            now = time.time()
            fields = {f"o.{cid}.{k}": v for cid, f in states.items() for k, v in {**f, "updated": now}.items()}
            self.states.update_one({"_id": session_id}, {"$set": fields}, upsert=True)

    def of_cycle(self, cycle_id: str) -> list[dict[str, Any]]:
        return list(self.col.find({"cycle_id": cycle_id}).sort("leg", ASCENDING))

    def of_session(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        """Every order's intent with its latest known state merged in."""
        intents = list(self.col.find({} if session_id is None else {"session_id": session_id}))
        known: dict[str, Any] = {}
        for doc in self.states.find({} if session_id is None else {"_id": session_id}):
            known.update(doc.get("o") or {})
        return [{**d, **known.get(d["_id"], {})} for d in intents]

    def count_day(self, day: str) -> int:
        return self.col.count_documents({"day": day})

    def get(self, client_order_id: str) -> Optional[dict[str, Any]]:
        return self.col.find_one({"_id": client_order_id})


class KillSwitch:
    """One document: while `halted`, no process starts a wave of orders and no approval resumes a broker cycle."""

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
        self.col.update_one(
            {"_id": session_id}, {"$setOnInsert": {"broker": broker, "host": host, "at": time.time()}}, upsert=True
        )

    def broker_of(self, session_id: str) -> Optional[str]:
        doc = self.col.find_one({"_id": session_id})
        return doc["broker"] if doc else None
