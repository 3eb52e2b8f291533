"""Per-session portfolio state and the once-per-cycle execution ledger."""
from __future__ import annotations

import time
from typing import Any

from pymongo import ASCENDING
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from schemas.portfolio import PortfolioSnapshot


class PortfolioStore:
    """Collection 'portfolios': one doc per session_id {session_id, snapshot, cycle_id, updated_ts}."""

    def __init__(self, db: Database) -> None:
        self.col = db["portfolios"]

    def ensure_indexes(self) -> None:
        self.col.create_index([("session_id", ASCENDING)], unique=True, name="session_id")

    def load(self, session_id: str) -> PortfolioSnapshot | None:
        doc = self.col.find_one({"session_id": session_id}, {"_id": 0, "snapshot": 1})
        return None if doc is None else PortfolioSnapshot.model_validate(doc["snapshot"])

    def save(self, session_id: str, snapshot: PortfolioSnapshot, cycle_id: str) -> None:
        self.col.update_one(
            {"session_id": session_id},
            {"$set": {"snapshot": snapshot.model_dump(mode="json"), "cycle_id": cycle_id, "updated_ts": time.time()}},
            upsert=True,
        )


class ExecutionLedger:
    """Collection 'executions', unique on cycle_id: a cycle's orders are filled at most once."""

    def __init__(self, db: Database) -> None:
        self.col = db["executions"]

    def ensure_indexes(self) -> None:
        self.col.create_index([("cycle_id", ASCENDING)], unique=True, name="cycle_id")
        self.col.create_index([("session_id", ASCENDING)], name="session_id")

    def get(self, cycle_id: str) -> dict[str, Any] | None:
        """The result dict recorded for cycle_id (as passed to record), or None."""
        doc = self.col.find_one({"cycle_id": cycle_id}, {"_id": 0, "result": 1})
        return None if doc is None else doc["result"]

    def record(self, cycle_id: str, session_id: str, result: dict[str, Any]) -> bool:
        """True if newly recorded; False if cycle_id was already recorded (the first result stays)."""
        try:
            self.col.insert_one(
                {"cycle_id": cycle_id, "session_id": session_id, "result": result, "recorded_ts": time.time()}
            )
        except DuplicateKeyError:
            return False
        return True
