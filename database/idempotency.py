"""Collection `idempotency_keys`: the answer a keyed request got, so a retry with the same key gets the same answer
and starts nothing (IETF httpapi draft "The Idempotency-Key HTTP Header Field", as Stripe uses it).

One document per (scope, key), `_id` = "<scope> <key>" (a key has no spaces): the unique `_id` lets exactly one of
many concurrent first uses insert it, and the others find it. It holds the capability and a fingerprint (sha256
of the capability and its validated input), `state` running | done, the `status` ("ok" or the kernel error
kind) and the `response` (JSON text) once answered, the session and cycle the answer named, the owner and token
of the run (database/claims.py), how often each use happened (`uses`), and `expires_at`: a TTL index removes the
document a day (TTL_S) after its first use. An expired document the server has not removed yet reads as absent.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from database import claims

COLLECTION = "idempotency_keys"
TTL_S = 24 * 3600


@dataclass
class Begun:
    """What a keyed request found: `run` (it is the first: answer it, then finish), `repeat` (answered before:
    give that answer), `mismatch` (the key was used for another request), `busy` (the first is still running, or
    was cut off: `live` says which)."""

    state: Literal["run", "repeat", "mismatch", "busy"]
    record: dict[str, Any]
    live: bool = True


class IdempotencyKeys:
    def __init__(self, db: Database, ttl_s: float = TTL_S) -> None:
        self.col, self.ttl_s = db[COLLECTION], ttl_s

    def ensure_indexes(self) -> None:
        self.col.create_index("expires_at", expireAfterSeconds=0, name="ttl")

    def begin(self, scope: str, key: str, capability: str, fingerprint: str) -> Begun:
        now, token = time.time(), uuid.uuid4().hex
        mine = {
            "_id": f"{scope} {key}",
            "scope": scope,
            "key": key,
            "capability": capability,
            "fingerprint": fingerprint,
            "state": "running",
            "status": None,
            "response": None,
            "session_id": None,
            "cycle_id": None,
            "owner": claims.owner(),
            "token": token,
            "created_at": now,
            "expires_ts": now + self.ttl_s,
            "uses": {"first": 1},
            "expires_at": dt.datetime.fromtimestamp(now + self.ttl_s, dt.UTC),
        }
        claims.hold(token)
        won = False
        try:
            for _ in range(10):  # a record that expired (or was removed) between our insert and our read: again
                try:
                    self.col.insert_one(dict(mine))
                    won = True
                    return Begun("run", mine)
                except DuplicateKeyError:
                    held = self.col.find_one({"_id": mine["_id"]})
                if held is None:
                    continue
                if float(held.get("expires_ts") or 0) <= now:  # the TTL monitor has not removed it yet
                    won = (
                        self.col.find_one_and_replace({"_id": held["_id"], "token": held["token"]}, dict(mine))
                        is not None
                    )
                    if won:
                        return Begun("run", mine)
                    continue
                if held.get("fingerprint") != fingerprint:
                    return Begun("mismatch", held)
                if held.get("state") == "done":
                    return Begun("repeat", held)
                if claims.live(held, since=float(held.get("created_at") or 0)):
                    return Begun("busy", held)
                # not live: cut off, or it answered after our read (finish() stores the answer before it lets go
                # of the claim), so the record read again says which
                again = self.col.find_one({"_id": mine["_id"]})
                if again is None or again.get("token") != held.get("token"):
                    continue  # removed or replaced meanwhile: begin again
                if again.get("state") == "done":
                    return Begun("repeat", again)
                return Begun("busy", again, live=False)
            raise RuntimeError(f"idempotency key {key!r}: its record kept changing while reading it")
        finally:
            if not won:
                claims.drop(token)

    def finish(
        self, record: dict[str, Any], status: str, response: str, session_id: Optional[str], cycle_id: Optional[str]
    ) -> None:
        """The first run answered: its answer is what every later use with the key gets."""
        try:
            self.col.update_one(
                {"_id": record["_id"], "token": record["token"]},
                {
                    "$set": {
                        "state": "done",
                        "status": status,
                        "response": response,
                        "session_id": session_id,
                        "cycle_id": cycle_id,
                        "answered_at": time.time(),
                    }
                },
            )
        finally:
            claims.drop(record["token"])

    @staticmethod
    def abandon(record: dict[str, Any]) -> None:
        """The first run ended without an answer that can be stored (the store went away): the record stays
        `running`, and reads as cut off to every later use until it expires."""
        claims.drop(record["token"])

    def used(self, record: dict[str, Any], use: str) -> None:
        """Count one more use of the key (repeat, mismatch, busy): the record says how it was used."""
        self.col.update_one({"_id": record["_id"]}, {"$inc": {f"uses.{use}": 1}, "$set": {"last_used_at": time.time()}})
