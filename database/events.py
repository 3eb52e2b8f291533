"""The `state_events` audit log: append-only, gap-free per-session seq, idempotent by event_id."""
from __future__ import annotations

import threading
from typing import Any, Iterable

from pymongo import ASCENDING, ReturnDocument
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DuplicateKeyError

from schemas.events import StateEvent

COLLECTION = "state_events"
COUNTERS = "counters"


class DuplicateEventError(RuntimeError):
    """A (session_id, seq) collision or an event_id reused with different content."""


def _normalise(event: dict[str, Any], seq: int) -> dict[str, Any]:
    """Validate against StateEvent and return the plain-BSON document that will be stored."""
    doc = {k: v for k, v in event.items() if k != "_id"}
    if doc.get("seq") is not None:
        raise ValueError(f"append() assigns seq itself; event {doc.get('event_id')!r} came with seq={doc['seq']}")
    doc["seq"] = seq
    # mode="json" turns tuples/datetimes/enums inside payload into plain BSON types up front
    return StateEvent.model_validate(doc).model_dump(mode="json")


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("_id", "seq")}


class EventStore:
    def __init__(self, db: Database, *, serialize: threading.Lock | None = None) -> None:
        self.db = db
        self.col = db[COLLECTION]
        self.counters = db[COUNTERS]
        # Only set for mongomock: it has no concurrency control (find_one_and_update is a
        # read-then-write in Python, and finds iterate a dict other threads mutate), so every
        # append on it is serialised. A real server needs no lock: $inc is atomic there.
        self._serialize = serialize

    def ensure_indexes(self) -> None:
        self.col.create_index([("session_id", ASCENDING), ("seq", ASCENDING)], unique=True, name="session_seq")
        self.col.create_index([("event_id", ASCENDING)], unique=True, name="event_id")
        self.col.create_index(
            [("session_id", ASCENDING), ("cycle_id", ASCENDING), ("seq", ASCENDING)], name="session_cycle_seq"
        )
        self.col.create_index([("kind", ASCENDING)], name="kind")
        # nx-27017 plans a bare {session_id: x} (exists(), sessions()) only off a single-field index:
        # it ignores the compound prefix
        self.col.create_index([("session_id", ASCENDING)], name="session_id")

    # ---- writes -------------------------------------------------------------------------
    def append(self, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._serialize is None:
            return self._append(list(events))
        with self._serialize:
            return self._append(list(events))

    def _append(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not events:
            return []
        # validate everything before any write, so a malformed event writes nothing
        docs = [_normalise(e, 1) for e in events]
        fresh: dict[str, dict[str, Any]] = {}
        for d in docs:
            seen = fresh.get(d["event_id"])
            if seen is not None and _content(seen) != _content(d):
                raise DuplicateEventError(f"event_id {d['event_id']!r} appears twice in one batch with different content")
            fresh.setdefault(d["event_id"], d)
        return self._insert_new(list(fresh.values()))

    def _insert_new(self, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Insert first, look only on a collision: no query per append, so a long session (a backtest
        episode holds >100k events) costs the same per append as a short one. nx-27017 scans the whole
        collection for an `$in` on event_id, but walks the unique index for an equality lookup."""
        if not new:
            return []
        by_session: dict[str, list[dict[str, Any]]] = {}
        for d in new:
            by_session.setdefault(d["session_id"], []).append(d)
        for session_id, group in by_session.items():
            counter = self.counters.find_one_and_update(
                {"_id": session_id}, {"$inc": {"seq": len(group)}}, upsert=True,
                return_document=ReturnDocument.AFTER,
            )
            first = counter["seq"] - len(group) + 1
            for i, d in enumerate(group):
                d["seq"] = first + i
        try:
            # insert_many adds _id to the dicts it is given: hand it copies, return clean docs
            self.col.insert_many([dict(d) for d in new], ordered=True)
        except BulkWriteError as exc:
            written = int(exc.details.get("nInserted", 0))
            err = (exc.details.get("writeErrors") or [{}])[0]
            clash = new[written]
            if not self._release_unused(new[written:]):
                raise DuplicateEventError(
                    f"append stopped at event {written} of {len(new)} ({written} written) and another writer "
                    f"took seqs meanwhile, so seq {clash['seq']}.. of session {clash['session_id']!r} stay unused: "
                    f"{err.get('errmsg', exc)}") from exc
            old = self.col.find_one({"event_id": clash["event_id"]}, {"_id": 0})
            if old is None:
                raise DuplicateEventError(
                    f"seq {clash['seq']} of session {clash['session_id']!r} is already taken "
                    f"({written} of {len(new)} written): {err.get('errmsg', exc)}") from exc
            if _content(old) != _content(clash):
                raise DuplicateEventError(
                    f"event_id {clash['event_id']!r} already stored (session {old['session_id']!r}, seq "
                    f"{old['seq']}) with different content") from exc
            # an identical copy is already stored: appending it again is a no-op; the rest goes on
            rest = [{k: v for k, v in d.items() if k != "seq"} for d in new[written + 1:]]
            return new[:written] + self._insert_new(rest)
        return new

    def _release_unused(self, unwritten: list[dict[str, Any]]) -> bool:
        """Give back the seqs of events an ordered insert did not write, so a failed append leaves no gap.

        Conditional on the counter still ending at our block: if another writer allocated after us the
        seqs cannot be returned; False then (the caller reports the gap).
        """
        ends: dict[str, tuple[int, int]] = {}
        for d in unwritten:  # per session, unwritten events are the tail of its contiguous block
            n, end = ends.get(d["session_id"], (0, 0))
            ends[d["session_id"]] = (n + 1, max(end, d["seq"]))
        released = True
        for session_id, (n, end) in ends.items():
            res = self.counters.update_one({"_id": session_id, "seq": end}, {"$inc": {"seq": -n}})
            released = released and res.modified_count == 1
        return released

    def insert_raw(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Insert a complete event with a caller-chosen seq (tests, repair tools)."""
        clean = StateEvent.model_validate({k: v for k, v in doc.items() if k != "_id"}).model_dump(mode="json")
        lock = self._serialize
        if lock is not None:
            lock.acquire()
        try:
            self.col.insert_one(dict(clean))
            # keep the counter ahead of raw seqs so later appends don't collide with them
            self.counters.update_one({"_id": clean["session_id"]}, {"$max": {"seq": clean["seq"]}}, upsert=True)
        except DuplicateKeyError as exc:
            raise DuplicateEventError(
                f"event {clean['event_id']!r} (session {clean['session_id']!r}, seq {clean['seq']}) collides "
                f"with a stored event: {exc.details.get('errmsg', exc) if exc.details else exc}"
            ) from exc
        finally:
            if lock is not None:
                lock.release()
        return clean

    # ---- reads --------------------------------------------------------------------------
    def read(self, session_id: str, kind: str | None = None, cycle_id: str | None = None) -> list[dict[str, Any]]:
        # the seq range lets nx-27017 walk the (session_id, seq) index; a no-op filter on MongoDB
        query: dict[str, Any] = {"session_id": session_id, "seq": {"$gte": 1}}
        if kind is not None:
            query["kind"] = kind
        if cycle_id is not None:
            query["cycle_id"] = cycle_id
        # no server-side projection: nx-27017 applies it in Python (~30% of a 10k-event read); dropping
        # _id here is cheaper
        docs = list(self.col.find(query).sort("seq", ASCENDING))
        for d in docs:
            d.pop("_id", None)
        return docs

    def sessions(self, limit: int = 50) -> list[dict[str, Any]]:
        """Most recent sessions first: session_id, first_ts, last_ts, events, cycles, last_kind, last_state."""
        pipeline = [
            # sorted input makes $last the highest-seq event of each session
            {"$sort": {"session_id": 1, "seq": 1}},
            {"$group": {
                "_id": "$session_id",
                "first_ts": {"$min": "$ts"},
                "last_ts": {"$max": "$ts"},
                "events": {"$sum": 1},
                "cycle_ids": {"$addToSet": "$cycle_id"},
                "last_kind": {"$last": "$kind"},
                "last_state": {"$last": "$state"},
            }},
            {"$sort": {"last_ts": -1}},
            {"$limit": int(limit)},
        ]
        out = []
        for row in self.col.aggregate(pipeline):
            out.append({
                "session_id": row["_id"], "first_ts": row["first_ts"], "last_ts": row["last_ts"],
                "events": row["events"], "cycles": len(row["cycle_ids"]),
                "last_kind": row["last_kind"], "last_state": row["last_state"],
            })
        return out

    def exists(self, session_id: str) -> bool:
        return self.col.find_one({"session_id": session_id}, {"_id": 1}) is not None

    def count(self, session_id: str) -> int:
        # seq is gap-free from 1, so the session's counter is its event count; count_documents
        # is a full scan on nx-27017 (~0.4 s at 7k events) while this is one indexed lookup
        doc = self.counters.find_one({"_id": session_id})
        return int(doc["seq"]) if doc else 0

    def cycle_ids(self, session_id: str) -> list[str]:
        """The session's cycle ids in order (cycle ids are `<session>:c<n>`, numbered by next_cycle)."""
        doc = self.counters.find_one({"_id": f"{session_id}#cycles"})
        return [f"{session_id}:c{i}" for i in range(1, int(doc["n"]) + 1)] if doc else []

    def next_cycle(self, session_id: str) -> int:
        """Allocate the session's next cycle number (1, 2, …) atomically."""
        doc = self.counters.find_one_and_update({"_id": f"{session_id}#cycles"}, {"$inc": {"n": 1}}, upsert=True,
                                                return_document=ReturnDocument.AFTER)
        return int(doc["n"])
