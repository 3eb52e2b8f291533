"""Collection `llm_cache`: a provider's answer per request hash (agent/cache.py makes the key and the entry).

The key is the document's `_id`, so a lookup is one indexed read and a second write of the same key keeps the
first answer (the one whose audit event the cache points at)."""
from __future__ import annotations

import time
from typing import Any, Optional

from pymongo.database import Database
from pymongo.errors import DuplicateKeyError


class LlmCacheStore:
    def __init__(self, db: Database) -> None:
        self.col = db["llm_cache"]

    def get(self, key: str) -> Optional[dict[str, Any]]:
        doc = self.col.find_one({"_id": key})
        if doc is None:
            return None
        doc.pop("_id", None)
        return doc

    def put(self, key: str, entry: dict[str, Any]) -> None:
        try:
            self.col.insert_one({**entry, "_id": key, "stored_ts": time.time()})
        except DuplicateKeyError:
            pass

    def count(self) -> int:
        return self.col.count_documents({})

    def clear(self) -> int:
        return self.col.delete_many({}).deleted_count
