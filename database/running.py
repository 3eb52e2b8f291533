"""Cycles in flight (collection `running_cycles`): what a deletion must not cut from under, and the fence that stops
a cycle whose session was deleted by force.

A cycle takes a lease here as it starts (graph/machine/runner.py `_invoke`) and drops it when it ends: one document
per cycle, owned as an approval claim is (database/claims.py: live while held in this process, while its pid lives
on this host, or for LEASE_S from another host). `sessions delete` and `prune` refuse a session with a live lease
unless forced (database/retention.py). A deletion, forced or not, first marks every lease of the session `fenced`;
the cycle checks its lease after each batch of events is stored, at its audit barrier and after its fill, and once
fenced undoes what it wrote after the deletion (that batch, the head it moved, the fill) and stops with
SessionDeleted. The check comes after the write, so either the write landed before the fence (and the deletion,
which removes after fencing, removes it) or the writer sees the fence and removes it itself: nothing of the
running cycle outlives the deletion, whichever wins.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

from pymongo import ASCENDING
from pymongo.database import Database
from pymongo.errors import PyMongoError

from database import claims

COLLECTION = "running_cycles"
LEASE_S = 60 * 60  # a cycle on another host still running after this is taken as dead
_CURRENT: contextvars.ContextVar[Optional[Lease]] = contextvars.ContextVar("tradegraph_cycle_lease", default=None)


class SessionDeleted(RuntimeError):
    """The cycle's session was deleted (forced) while it ran: what it wrote since is removed, and it stops."""


@dataclass
class Lease:
    col: Any
    token: str
    session_id: str
    cycle_id: str

    def fenced(self) -> Optional[dict[str, Any]]:
        """The fence a deletion put on this lease ({by, at, admin_seq}), or None while the cycle may go on. A lease
        gone from the store counts as fenced: nothing vouches for the session any more."""
        doc = self.col.find_one({"_id": self.token}, {"fenced": 1})
        if doc is None:
            return {"by": "unknown", "at": None, "admin_seq": None}
        return doc.get("fenced")

    def check(self) -> None:
        fence = self.fenced()
        if fence is not None:
            raise SessionDeleted(fence_message(self.session_id, self.cycle_id, fence))

    def end(self) -> None:
        claims.drop(self.token)
        try:
            self.col.delete_one({"_id": self.token})
        except PyMongoError:
            pass  # the store is gone: the lease reads as dead once this process is


def fence_message(session_id: str, cycle_id: str, fence: dict[str, Any]) -> str:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(fence["at"]))) if fence.get("at") else "an unknown time"
    record = f", admin log record {fence['admin_seq']}" if fence.get("admin_seq") else ""
    return (
        f"session '{session_id}' was deleted by {fence.get('by')} at {at}{record} while cycle {cycle_id} ran: "
        f"what the cycle wrote since is removed and it stopped"
    )


class RunningCycles:
    def __init__(self, db: Database) -> None:
        self.col = db[COLLECTION]

    def ensure_indexes(self) -> None:
        self.col.create_index([("session_id", ASCENDING)], name="session_id")

    def start(self, session_id: str, cycle_id: str) -> Lease:
        token = uuid.uuid4().hex
        claims.hold(token)  # first: this process never reads its own lease as abandoned
        self.col.insert_one(
            {
                "_id": token,
                "token": token,
                "session_id": session_id,
                "cycle_id": cycle_id,
                "owner": claims.owner(),
                "at": time.time(),
                "fenced": None,
            }
        )
        return Lease(self.col, token, session_id, cycle_id)

    def live(self, session_id: str) -> list[dict[str, Any]]:
        """The session's cycles in flight (unfenced, their owner at work), oldest first."""
        docs = self.col.find({"session_id": session_id}).sort("at", ASCENDING)
        return [
            d for d in docs if not d.get("fenced") and claims.live(d, since=float(d.get("at") or 0), lease_s=LEASE_S)
        ]

    def fence(self, session_ids: Iterable[str], fence: dict[str, Any]) -> int:
        return self.col.update_many(
            {"session_id": {"$in": list(session_ids)}}, {"$set": {"fenced": fence}}
        ).modified_count


def current() -> Optional[Lease]:
    """The lease of the cycle running in this context (set by the runner), or None."""
    return _CURRENT.get()


def entered(lease: Optional[Lease]) -> contextvars.Token:
    return _CURRENT.set(lease)


def left(token: contextvars.Token) -> None:
    _CURRENT.reset(token)


def describe(doc: dict[str, Any]) -> str:
    who = doc.get("owner") or {}
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(doc.get("at") or 0)))
    return f"cycle {doc.get('cycle_id')} in flight (pid {who.get('pid')} on {who.get('host')}, since {at})"


class FencedEvents:
    """The event log as one cycle's writer sees it (BufferedEventWriter.events): each batch is stored, then the lease
    checked; a fenced batch is removed again (see the module doc) and SessionDeleted raised, which stops the writer.
    The durability barrier checks the lease before it syncs, so a cycle fenced before its fill never fills."""

    def __init__(self, events: Any, lease: Lease) -> None:
        self._events, self._lease = events, lease

    def __getattr__(self, name: str) -> Any:
        return getattr(self._events, name)

    def append(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        written = self._events.append(batch)
        fence = self._lease.fenced()
        if fence is not None:
            self._undo(batch, written)
            raise SessionDeleted(fence_message(self._lease.session_id, self._lease.cycle_id, fence))
        return written

    def sync(self) -> None:
        self._lease.check()
        self._events.sync()

    def _undo(self, batch: list[dict[str, Any]], written: list[dict[str, Any]]) -> None:
        """Remove what this batch put in the store of the deleted session: its events, the head it moved, its packs,
        and this process's note of them (a summary must not be folded back from them)."""
        sid, events = self._lease.session_id, self._events
        ids = [e["event_id"] for e in batch if e.get("session_id") == sid]
        events.col.delete_many({"session_id": sid, "event_id": {"$in": ids}})
        hashes = [d["hash"] for d in written if d.get("session_id") == sid and d.get("hash")]
        events.heads.col.delete_many({"_id": sid, "hash": {"$in": hashes}})
        if not events.exists(sid):
            events.release_packs(sid)
        getattr(events, "_heads", {}).pop(sid, None)
        seen = getattr(events, "seen", None)
        if seen is not None:
            seen.drop(sid, upto=2**62)
            seen.summaries.pop(sid, None)
