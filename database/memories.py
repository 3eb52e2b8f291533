"""Collection `memories`: reviews and cycle notes, each tagged with what it is about and when it became known.

A memory id is written once: adding it again keeps the first record (a re-run MEMORIZING never rewrites a
lesson that later cycles may already have recalled)."""

from __future__ import annotations

import builtins
import time
from typing import Any, Optional

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from schemas.memory import MemoryRecord

_FIELDS = {name: 1 for name in MemoryRecord.model_fields}


class MemoryStore:
    def __init__(self, db: Database) -> None:
        self.col = db["memories"]

    def ensure_indexes(self) -> None:
        self.col.create_indexes(
            [
                IndexModel([("memory_id", ASCENDING)], unique=True, name="memory_id"),
                IndexModel([("symbol", ASCENDING), ("known_at", ASCENDING)], name="symbol_known_at"),
                IndexModel([("session_id", ASCENDING)], name="session_id"),
                IndexModel([("added_ts", DESCENDING)], name="added_ts"),  # revision(): the newest insert, no scan
            ]
        )

    def add(self, record: MemoryRecord) -> bool:
        try:
            self.col.insert_one({**record.model_dump(mode="json"), "added_ts": time.time()})
        except DuplicateKeyError:
            return False
        return True

    def get(self, memory_id: str) -> Optional[MemoryRecord]:
        doc = self.col.find_one({"memory_id": memory_id}, {"_id": 0, **_FIELDS})
        return MemoryRecord.model_validate(doc) if doc else None

    def list(
        self,
        *,
        symbol: Optional[str] = None,
        session_id: Optional[str] = None,
        before: Optional[str] = None,
        kind: Optional[str] = None,
        cycle_id: Optional[str] = None,
        limit: int = 100,
    ) -> list[MemoryRecord]:
        query: dict[str, Any] = {}
        if symbol:
            query["symbol"] = symbol
        if session_id:
            query["session_id"] = session_id
        if cycle_id:
            query["cycle_id"] = cycle_id
        if kind:
            query["kind"] = kind
        if before:
            query["known_at"] = {"$lt": before}
        cursor = self.col.find(query, {"_id": 0, **_FIELDS}).sort([("known_at", ASCENDING), ("memory_id", ASCENDING)])
        return [MemoryRecord.model_validate(d) for d in cursor.limit(limit)]

    def all(self) -> builtins.list[MemoryRecord]:
        return [MemoryRecord.model_validate(d) for d in self.col.find({}, {"_id": 0, **_FIELDS})]

    def forget(
        self, *, memory_id: Optional[str] = None, session_id: Optional[str] = None, symbol: Optional[str] = None
    ) -> int:
        query = {k: v for k, v in (("memory_id", memory_id), ("session_id", session_id), ("symbol", symbol)) if v}
        if not query:
            raise ValueError("forget needs a memory id, a session or a symbol")
        return self.col.delete_many(query).deleted_count

    def count(self) -> int:
        return self.col.count_documents({})

    def revision(self) -> str:
        """Changes whenever the collection does: its size and the newest insert (a forget lowers the size; a
        forget and an add between two reads change the newest). Two indexed reads, however many memories."""
        last = self.col.find_one({}, {"_id": 0, "added_ts": 1, "memory_id": 1}, sort=[("added_ts", -1)])
        # the collection's own count, not count_documents: that is an aggregation nx-27017 runs over every
        # memory in Python (54 ms at 2,000, twice per backtest decision point, growing with the backtest); this
        # is SQL's COUNT(*) there and collection metadata on MongoDB, which moves with every insert and delete
        size = self.col.estimated_document_count()
        return f"{size}:{(last or {}).get('added_ts')}:{(last or {}).get('memory_id')}"
