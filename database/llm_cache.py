"""Collection `llm_cache`: a provider's answer per request hash (agent/cache.py makes the key and the entry).

The key is the document's `_id`, so a lookup is one indexed read and a second write of the same key keeps the
first answer (the one whose audit event the cache points at). An entry is only as good as the audit event it cites:
`cited` reads that event back (agent/cache.py `entry_problem` compares the two before an answer is used)."""

from __future__ import annotations

import time
from typing import Any, Optional

from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from database.blobs import BlobStore
from database.events import COLLECTION as EVENTS
from database.events import event_hash


class LlmCacheStore:
    def __init__(self, db: Database) -> None:
        self.col = db["llm_cache"]
        self.events, self.blobs = db[EVENTS], BlobStore(db)

    def get(self, key: str) -> Optional[dict[str, Any]]:
        doc = self.col.find_one({"_id": key})
        if doc is None:
            return None
        doc.pop("_id", None)
        return doc

    def cited(self, event_id: str) -> Optional[dict[str, Any]]:
        """The stored event an entry names (its payload read from its pack), with `intact`: whether its content
        still matches its hash; None if no event has that id."""
        doc = self.events.find_one({"event_id": event_id})
        if doc is None:
            return None
        doc.pop("_id", None)
        unreadable = self.blobs.expand([doc])
        return {**doc, "intact": not any(unreadable.values()) and event_hash(doc) == doc.get("hash")}

    def put(self, key: str, entry: dict[str, Any]) -> None:
        try:
            self.col.insert_one({**entry, "_id": key, "stored_ts": time.time()})
        except DuplicateKeyError:
            pass

    def count(self) -> int:
        return self.col.count_documents({})

    def clear(self) -> int:
        return self.col.delete_many({}).deleted_count
