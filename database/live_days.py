"""Collection `live_days`: one record per (live loop, trading day), so a restarted `tradegraph live` never runs a
day twice and resumes the day it had started. Every step forward is a compare-and-set on the record's `state`:
of two processes only one moves it (claimed → running → decided → done, or expired / cut_off / skipped)."""
from __future__ import annotations

import time
from typing import Any, Optional

from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

COLLECTION = "live_days"
FINAL = ("done", "expired", "cut_off", "skipped")


class LiveDays:
    def __init__(self, db: Database) -> None:
        self.col = db[COLLECTION]

    @staticmethod
    def key(loop: str, day: str) -> str:
        return f"{loop}|{day}"

    def claim(self, loop: str, day: str, session_id: str) -> dict[str, Any]:
        """The day's record: a new one (`claimed`) or the one a previous run left."""
        doc = {"_id": self.key(loop, day), "loop": loop, "day": day, "session_id": session_id, "state": "claimed",
               "at": time.time()}
        try:
            self.col.insert_one(doc)
            return doc
        except DuplicateKeyError:
            found = self.col.find_one({"_id": doc["_id"]})
            assert found is not None  # records are never deleted
            return found

    def advance(self, key: str, was: str, state: str, **fields: Any) -> bool:
        """Move the record from `was` to `state`; False when another process moved it first."""
        res = self.col.update_one({"_id": key, "state": was}, {"$set": {"state": state, "updated": time.time(),
                                                                          **fields}})
        return res.modified_count == 1

    def note(self, key: str, **fields: Any) -> None:
        self.col.update_one({"_id": key}, {"$set": fields})

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.col.find_one({"_id": key})

    def unfinished(self, loop: str) -> list[dict[str, Any]]:
        return list(self.col.find({"loop": loop, "state": {"$nin": list(FINAL)}}).sort("day", 1))
