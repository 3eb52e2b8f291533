"""Collection `live_days`: one record per (live loop, trading day), so a restarted `tradegraph live` never runs a
day twice and resumes the day it had started. Every step forward is a compare-and-set on the record's `state`:
of two processes only one moves it (claimed → [fetched →] running → decided → done, or expired / cut_off / skipped).

Collection `live_loops`: one lease per loop name, so two `tradegraph live --name NAME` never trade side by side. The
lease is owned as an approval claim is (database/claims.py): live while its process holds its token, on this host
while its pid is alive, from another host until LEASE_S after it was last renewed."""

from __future__ import annotations

import time
import uuid
from typing import Any, Optional

from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from database import claims

COLLECTION = "live_days"
LOOPS = "live_loops"
LEASE_S = 120.0  # a loop on another host not heard of for this long is taken as dead (its holder renews every 30 s)
FINAL = ("done", "expired", "cut_off", "skipped")


class LiveDays:
    def __init__(self, db: Database) -> None:
        self.col = db[COLLECTION]

    @staticmethod
    def key(loop: str, day: str) -> str:
        return f"{loop}|{day}"

    def claim(self, loop: str, day: str, session_id: str) -> dict[str, Any]:
        """The day's record: a new one (`claimed`) or the one a previous run left."""
        doc = {
            "_id": self.key(loop, day),
            "loop": loop,
            "day": day,
            "session_id": session_id,
            "state": "claimed",
            "at": time.time(),
        }
        try:
            self.col.insert_one(doc)
            return doc
        except DuplicateKeyError:
            found = self.col.find_one({"_id": doc["_id"]})
            assert found is not None  # records are never deleted
            return found

    def advance(self, key: str, was: str, state: str, **fields: Any) -> bool:
        """Move the record from `was` to `state`; False when another process moved it first."""
        res = self.col.update_one(
            {"_id": key, "state": was}, {"$set": {"state": state, "updated": time.time(), **fields}}
        )
        return res.modified_count == 1

    def note(self, key: str, **fields: Any) -> None:
        self.col.update_one({"_id": key}, {"$set": fields})

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.col.find_one({"_id": key})

    def unfinished(self, loop: str) -> list[dict[str, Any]]:
        return list(self.col.find({"loop": loop, "state": {"$nin": list(FINAL)}}).sort("day", 1))


class LoopLeases:
    def __init__(self, db: Database) -> None:
        self.col = db[LOOPS]

    def take(self, loop: str) -> tuple[Optional[str], Optional[dict[str, Any]]]:
        """(token, None) when this process now holds the loop's lease; (None, the holder's lease) when a live
        process holds it. A dead holder's lease is taken over by compare-and-set on its token, so of two processes
        finding it dead only one takes it."""
        token = uuid.uuid4().hex
        claims.hold(token)  # first: this process never reads its own lease as abandoned
        now = time.time()
        doc = {"_id": loop, "token": token, "owner": claims.owner(), "at": now, "renewed": now}
        try:
            self.col.insert_one(doc)
            return token, None
        except DuplicateKeyError:
            pass
        held = self.col.find_one({"_id": loop})
        if held is not None and not claims.live(held, since=float(held.get("renewed") or 0), lease_s=LEASE_S):
            took = self.col.update_one(
                {"_id": loop, "token": held["token"]}, {"$set": {k: v for k, v in doc.items() if k != "_id"}}
            )
            if took.modified_count == 1:
                return token, None
            held = self.col.find_one({"_id": loop})
        claims.drop(token)
        return None, held or {"owner": {}, "at": None}

    def renew(self, loop: str, token: str) -> bool:
        """False when the lease is no longer this token's (taken over as dead)."""
        return (
            self.col.update_one({"_id": loop, "token": token}, {"$set": {"renewed": time.time()}}).modified_count == 1
        )

    def release(self, loop: str, token: str) -> None:
        claims.drop(token)
        self.col.delete_one({"_id": loop, "token": token})
