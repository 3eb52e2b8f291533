"""The `state_events` audit log: append-only, gap-free per-session seq, idempotent by event_id."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import orjson
from pymongo import ASCENDING, DESCENDING, IndexModel, ReturnDocument, WriteConcern
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from database.blobs import BlobStore, split
from database.heads import ChainHeads, LogEnd, Outside, audit_key, compare, cycle_number, mark_key_id
from database.portfolio import ExecutionLedger

COLLECTION = "state_events"
COUNTERS = "counters"
MAX_SEQ_RACES = 1000
ACKED = WriteConcern(w="majority")
DURABLE = WriteConcern(w="majority", j=True)
# On a single node (a standalone mongod, the embedded nx-27017) a majority is that node: w=1 says the same.
# It matters on nx-27017, which maps write concerns onto SQLite's `synchronous` per database and never
# resets it for w="majority": after one `j` write (sync()) every later insert ran at synchronous=FULL, an
# fsync per document (0.43 ms instead of 0.15). w=1 sets it back to NORMAL; sync()'s `j` still fsyncs the
# WAL, and with it every write before it.
ACKED_SINGLE = WriteConcern(w=1)
DURABLE_SINGLE = WriteConcern(w=1, j=True)
GENESIS = "0" * 64
READ_CHUNK = 5000  # events per query of a whole-session read (see EventStore._read_ranges)


# what nx-27017's JSON decoder (neosqlite_json_loads) turns into other types: a stored document containing one
# is read through the server, so both paths give the same answer
_DECODED_MARKERS = (b'"$date"', b'"__neosqlite_binary__"')
_OID_MARKER = b'"__neosqlite_objectid__"'


class DuplicateEventError(RuntimeError):
    """A (session_id, seq) collision or an event_id reused with different content."""


def _normalise(event: dict[str, Any], seq: int) -> dict[str, Any]:
    """Validate against StateEvent and return the plain-BSON document that will be stored."""
    doc = {k: v for k, v in event.items() if k != "_id"}
    if doc.get("seq") is not None:
        raise ValueError(f"append() assigns seq itself; event {doc.get('event_id')!r} came with seq={doc['seq']}")
    doc["seq"] = seq
    from schemas.events import StateEvent  # here: a command that only reads loads none of the event models

    # mode="json" turns tuples/datetimes/enums inside payload into plain BSON types up front
    return StateEvent.model_validate(doc).model_dump(mode="json")


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    """What makes two copies of an event the same event: everything but where it landed in the log."""
    return {k: v for k, v in doc.items() if k not in ("_id", "seq", "prev_hash", "hash")}


def event_hash(doc: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of the stored event (with its seq and prev_hash, without its own
    hash): each event seals its predecessor, so an edited, removed or reordered event breaks the chain."""
    body = {k: v for k, v in doc.items() if k not in ("_id", "hash")}
    # orjson: canonical (sorted keys, compact) and ~8x faster than json on a cycle's 190 events
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def single_node(db: Database) -> bool:
    """True if the server is one node (no replica set, no mongos): a majority of it is itself."""
    try:
        hello = db.client.admin.command("hello")
    except PyMongoError:
        return False  # unknown: keep majority
    return not hello.get("setName") and hello.get("msg") != "isdbgrid"


class EventStore:
    def __init__(self, db: Database, *, serialize: threading.Lock | None = None) -> None:
        self.db = db
        # batches are acknowledged by a majority; sync() adds the journal (see there)
        if serialize is not None:
            self.col, self._sync_col = db[COLLECTION], db[COUNTERS]
            self.heads = ChainHeads(db)
            self.blobs = BlobStore(db)
        else:
            one = single_node(db)
            self.col = db.get_collection(COLLECTION, write_concern=ACKED_SINGLE if one else ACKED)
            self._sync_col = db.get_collection(COUNTERS, write_concern=DURABLE_SINGLE if one else DURABLE)
            self.heads = ChainHeads(db, ACKED_SINGLE if one else ACKED)
            # a pack is acknowledged like the events that follow it: a crash can leave a pack without its events,
            # never an event without its pack
            self.blobs = BlobStore(db, ACKED_SINGLE if one else ACKED)
        self.counters = db[COUNTERS]
        # Only set for mongomock: it has no concurrency control (find_one_and_update is a
        # read-then-write in Python, and finds iterate a dict other threads mutate), so every
        # append on it is serialised. A real server needs no lock: $inc is atomic there.
        self._serialize = serialize
        self._heads: dict[str, tuple[int, str]] = {}
        # the embedded server's SQLite file for this database, when connect() knows it (see _read_local)
        self.local_file: Path | None = None

    def ensure_indexes(self) -> None:
        # one createIndexes command per collection (every connect asks, so every command pays its round trips)
        self.col.create_indexes(
            [
                IndexModel([("session_id", ASCENDING), ("seq", ASCENDING)], unique=True, name="session_seq"),
                IndexModel([("event_id", ASCENDING)], unique=True, name="event_id"),
                IndexModel(
                    [("session_id", ASCENDING), ("cycle_id", ASCENDING), ("seq", ASCENDING)], name="session_cycle_seq"
                ),
                IndexModel([("kind", ASCENDING)], name="kind"),
                # nx-27017 plans a bare {session_id: x} (exists(), sessions()) only off a single-field index:
                # it ignores the compound prefix
                IndexModel([("session_id", ASCENDING)], name="session_id"),
            ]
        )

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
                raise DuplicateEventError(
                    f"event_id {d['event_id']!r} appears twice in one batch with different content"
                )
            fresh.setdefault(d["event_id"], d)
        # large payloads go to the batch's packs (database/blobs.py), stored before any event that references them
        packs, stored = split([d["payload"] for d in fresh.values()], [d["session_id"] for d in fresh.values()])
        for pack in packs:
            self.blobs.put(pack)
        stored_payloads = {event_id: p for event_id, p in zip(fresh, stored)}
        by_session: dict[str, list[dict[str, Any]]] = {}
        for d in fresh.values():
            by_session.setdefault(d["session_id"], []).append(d)
        written: list[dict[str, Any]] = []
        for session_id, group in by_session.items():
            written += self._append_session(session_id, group, stored_payloads)
        order = {event_id: i for i, event_id in enumerate(fresh)}
        return sorted(written, key=lambda d: order[d["event_id"]])

    def _append_session(
        self, session_id: str, group: list[dict[str, Any]], stored_payloads: dict[str, dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Store the group, then move the session's chain head (database/heads.py) to the highest event the
        group now has in the log: after the insert is acknowledged, so the head never runs ahead of the log
        (a process killed in between leaves the log ahead of its head, which verify_chain reports as such)."""
        top: list[tuple[int, str]] = []  # (seq, hash) of the group's highest stored event, newly or before
        try:
            written = self._insert_session(session_id, group, top, stored_payloads)
        except BaseException:
            if top:  # part of the group is stored: its head too, if the store still answers; the error stands
                with contextlib.suppress(PyMongoError):
                    self.heads.advance(session_id, *top[0])
            raise
        if top:
            self.heads.advance(session_id, *top[0])
        return written

    def _insert_session(
        self,
        session_id: str,
        group: list[dict[str, Any]],
        top: list[tuple[int, str]],
        stored_payloads: dict[str, dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """Seqs are taken by the insert itself, never reserved ahead of it (eventsourcing's
        originator_version): the unique (session_id, seq) index makes a racing writer's insert fail,
        and it retries from the new head. An insert that dies half way leaves a contiguous prefix, so a
        process killed at any instant leaves no gap. An event_id already stored with identical content
        is a no-op; with other content it is a DuplicateEventError. `top` gets the highest (seq, hash) of
        the group found in the log, also when the call raises after storing part of it. Each event is hashed
        in full and stored with its payload's stored form (`stored_payloads`, by event_id: see blobs.split)."""

        def reached(doc: dict[str, Any]) -> None:
            if not top or int(doc["seq"]) > top[0][0]:
                top[:] = [(int(doc["seq"]), doc["hash"])]

        written: list[dict[str, Any]] = []
        pending = group
        for _ in range(MAX_SEQ_RACES):
            if not pending:
                return written
            seq, prev = self._head(session_id)
            for d in pending:
                seq += 1
                d["seq"], d["prev_hash"] = seq, prev
                d["hash"] = prev = event_hash(d)
            try:
                # insert_many adds _id to the dicts it is given: hand it copies, return clean (full) docs
                self.col.insert_many(
                    [{**d, "payload": stored_payloads.get(d["event_id"], d["payload"])} for d in pending], ordered=True
                )
            except BulkWriteError as exc:
                n = int(exc.details.get("nInserted", 0))
                written += pending[:n]
                if n:
                    self._heads[session_id] = (pending[n - 1]["seq"], pending[n - 1]["hash"])
                    reached(pending[n - 1])
                clash, pending = pending[n], pending[n + 1 :]
                old = self.col.find_one({"event_id": clash["event_id"]}, {"_id": 0})
                if old is None:  # another writer took this seq: re-read the head and go on from there
                    self._heads.pop(session_id, None)
                    pending = [clash] + pending
                    continue
                unreadable = self.blobs.expand([old]).get(0)  # compared in full: a pack is only how it is stored
                if unreadable:  # not "different content": what is stored cannot be compared at all
                    raise DuplicateEventError(
                        f"event_id {clash['event_id']!r} already stored (session {old['session_id']!r}, seq "
                        f"{old['seq']}), and its stored payload cannot be read ({unreadable}): whether this copy "
                        f"is the same cannot be told"
                    ) from exc
                if _content(old) != _content(clash):
                    raise DuplicateEventError(
                        f"event_id {clash['event_id']!r} already stored (session {old['session_id']!r}, seq "
                        f"{old['seq']}) with different content"
                    ) from exc
                # an identical copy is already stored (a redelivery): a no-op; the rest goes on. The head covers
                # it too: a batch whose reply was lost is stored, and its retry must still move the head
                if old["session_id"] == session_id and old.get("hash"):
                    reached(old)
                if old["session_id"] == session_id and int(old["seq"]) > self._heads.get(session_id, (0, ""))[0]:
                    self._heads.pop(session_id, None)
                continue
            written += pending
            self._heads[session_id] = (pending[-1]["seq"], pending[-1]["hash"])
            reached(pending[-1])
            pending = []
        if pending:
            raise DuplicateEventError(f"session {session_id!r}: gave up after {MAX_SEQ_RACES} seq races")
        return written

    def sync(self) -> None:
        """Return once every write acknowledged so far is journaled on a majority: a journaled write
        commits the journal up to itself, and the journal is sequential. One such write per durability
        barrier instead of `j` on every batch (an fsync each on the embedded server: +100 ms a cycle)."""
        self._sync_col.update_one({"_id": "#sync"}, {"$inc": {"n": 1}}, upsert=True)

    def _head(self, session_id: str) -> tuple[int, str]:
        """(last seq, its hash) of a session: cached per process, read from the log when unknown.
        A stale cache costs one collision and a re-read, never a wrong seq."""
        head = self._heads.get(session_id)
        if head is None:
            last = self.col.find_one(
                {"session_id": session_id, "seq": {"$gte": 1}},
                {"_id": 0, "seq": 1, "hash": 1},
                sort=[("seq", DESCENDING)],
            )
            head = (int(last["seq"]), last.get("hash") or GENESIS) if last else (0, GENESIS)
            self._heads[session_id] = head
        return head

    def insert_raw(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Insert a complete event with a caller-chosen seq (tests, repair tools)."""
        from schemas.events import StateEvent

        clean = StateEvent.model_validate({k: v for k, v in doc.items() if k != "_id"}).model_dump(mode="json")
        lock = self._serialize
        if lock is not None:
            lock.acquire()
        try:
            self.col.insert_one(dict(clean))
        except DuplicateKeyError as exc:
            raise DuplicateEventError(
                f"event {clean['event_id']!r} (session {clean['session_id']!r}, seq {clean['seq']}) collides "
                f"with a stored event: {exc.details.get('errmsg', exc) if exc.details else exc}"
            ) from exc
        finally:
            self._heads.pop(clean["session_id"], None)
            if lock is not None:
                lock.release()
        return clean

    # ---- reads --------------------------------------------------------------------------
    def read(
        self, session_id: str, kind: str | tuple[str, ...] | None = None, cycle_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The session's events in seq order (of one stored kind, or any of several), in full: a payload stored
        in a pack (database/blobs.py) is rebuilt here, the one place every reader goes through."""
        return self._read(session_id, kind, cycle_id)[0]

    def read_noting_unreadable(
        self, session_id: str, kind: str | tuple[str, ...] | None = None, cycle_id: str | None = None
    ) -> tuple[list[dict[str, Any]], dict[int, str]]:
        """read()'s events, and {seq: why its payload cannot be read} for each that keeps its stored form because
        its pack is missing or was edited: a reader that lists events as they are says so (`read_events`)."""
        docs, packed = self._read(session_id, kind, cycle_id)
        return docs, {int(docs[pos]["seq"]): why for pos, why in packed.items() if why}

    def by_event_id(self, event_id: str) -> Optional[dict[str, Any]]:
        """One stored event by its event_id (a unique index), in full (its pack read), or None."""
        doc = self.col.find_one({"event_id": event_id})
        if doc is None:
            return None
        doc.pop("_id", None)
        self.blobs.expand([doc], self.local_file)
        return doc

    def _read(
        self, session_id: str, kind: str | tuple[str, ...] | None = None, cycle_id: str | None = None
    ) -> tuple[list[dict[str, Any]], dict[int, Optional[str]]]:
        """(events, {position of each event stored with a pack: None, or why its pack could not be read}): such
        an event keeps its stored form."""
        # the seq range lets nx-27017 walk the (session_id, seq) index; a no-op filter on MongoDB
        query: dict[str, Any] = {"session_id": session_id, "seq": {"$gte": 1}}
        if isinstance(kind, tuple):
            query["kind"] = kind[0] if len(kind) == 1 else {"$in": list(kind)}
        elif kind is not None:
            query["kind"] = kind
        if cycle_id is not None:
            query["cycle_id"] = cycle_id
        # no server-side projection: nx-27017 applies it in Python (~30% of a 10k-event read); dropping
        # _id here is cheaper
        if kind is not None or cycle_id is not None:
            docs = list(self.col.find(query).sort("seq", ASCENDING))
        else:
            local = self._read_local_stored(session_id) if self.local_file is not None else None
            docs = local if local is not None else self._read_ranges(session_id)
        for d in docs:
            d.pop("_id", None)
        return docs, self.blobs.expand(docs, self.local_file)

    def _read_ranges(self, session_id: str) -> list[dict[str, Any]]:
        """A whole session in seq ranges of READ_CHUNK, each one query in one batch: nx-27017 materialises
        a query's whole answer and serves it in 101-document batches, copying the rest of the answer at each
        getMore (quadratic in the session's size); a range keeps both bounded. An empty range (a gap in the
        seqs) skips to the next stored seq, so a gap never ends the read early."""
        docs: list[dict[str, Any]] = []
        lo = 1
        while True:
            chunk = list(
                self.col.find({"session_id": session_id, "seq": {"$gte": lo, "$lt": lo + READ_CHUNK}})
                .sort("seq", ASCENDING)
                .batch_size(READ_CHUNK)
            )
            if chunk:
                docs += chunk
                lo = int(chunk[-1]["seq"]) + 1
                continue
            after = self.col.find_one(
                {"session_id": session_id, "seq": {"$gte": lo}}, {"_id": 0, "seq": 1}, sort=[("seq", ASCENDING)]
            )
            if after is None:
                return docs
            lo = int(after["seq"])

    def _read_local(self, session_id: str) -> list[dict[str, Any]] | None:
        """A whole session, in full, straight from the embedded server's SQLite file (its packs too), or None to ask
        the server instead (see _read_local_stored)."""
        docs = self._read_local_stored(session_id)
        if docs is not None:
            self.blobs.expand(docs, self.local_file)
        return docs

    def _read_local_stored(self, session_id: str) -> list[dict[str, Any]] | None:
        """A whole session as stored, straight from the embedded server's SQLite file, read-only, or None to ask
        the server instead. nx-27017 spends ~0.1 ms a document answering a read (the stored JSON decoded, every
        value walked for ObjectIds, sized, BSON-encoded; then decoded here): 1 s for 10k events. Here one
        indexed SELECT on its own (session_id, seq) index and orjson. SQLite's WAL lets this reader run beside
        the server's writer and see exactly the committed events the server would return.
        The answer is the server's own whenever this path could differ from it: None (the server path) if a
        stored document carries what nx-27017's decoder would turn into another type (`$date`, its binary and
        ObjectId markers), is not strict JSON (NaN), or the file is not laid out as expected."""
        path = self.local_file
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error:
            return None
        docs = []
        oid_key = _OID_MARKER.strip(b'"').decode()
        try:
            con.text_factory = bytes
            # row by row (not fetchall): each stored text is parsed while it is still in the CPU's cache
            for (raw,) in con.execute(
                f"SELECT data FROM {COLLECTION} WHERE json_extract(data, '$.session_id') = ? "
                "AND json_extract(data, '$.seq') >= 1 ORDER BY json_extract(data, '$.seq')",
                (session_id,),
            ):
                # the stored _id is nx-27017's ObjectId marker (read() drops _id): that one occurrence is expected
                if raw.count(_OID_MARKER) > 1 or _DECODED_MARKERS[0] in raw or _DECODED_MARKERS[1] in raw:
                    return None
                try:
                    doc = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    return None
                oid = doc.pop("_id", None)
                if _OID_MARKER in raw and not (isinstance(oid, dict) and oid_key in oid):
                    return None
                docs.append(doc)
        except sqlite3.Error:
            return None
        finally:
            con.close()
        return docs

    def release_packs(self, session_id: str) -> int:
        """Once a session's events are deleted, delete the packs no other session's events use (see
        database/blobs.py); the packs it shares stay. Returns how many were deleted."""
        return self.blobs.release(session_id)

    def sessions(self, limit: int = 50) -> list[dict[str, Any]]:
        """Most recent sessions first: session_id, first_ts, last_ts, events, cycles, last_kind, last_state,
        last_cycle_id."""
        pipeline: list[dict[str, Any]] = [
            # sorted input makes $last the highest-seq event of each session
            {"$sort": {"session_id": 1, "seq": 1}},
            {
                "$group": {
                    "_id": "$session_id",
                    "first_ts": {"$min": "$ts"},
                    "last_ts": {"$max": "$ts"},
                    "events": {"$sum": 1},
                    "cycle_ids": {"$addToSet": "$cycle_id"},
                    "last_kind": {"$last": "$kind"},
                    "last_state": {"$last": "$state"},
                    "last_cycle_id": {"$last": "$cycle_id"},
                }
            },
            {"$sort": {"last_ts": -1}},
            {"$limit": int(limit)},
        ]
        out = []
        for row in self.col.aggregate(pipeline):
            out.append(
                {
                    "session_id": row["_id"],
                    "first_ts": row["first_ts"],
                    "last_ts": row["last_ts"],
                    "events": row["events"],
                    "cycles": len(row["cycle_ids"]),
                    "last_kind": row["last_kind"],
                    "last_state": row["last_state"],
                    "last_cycle_id": row["last_cycle_id"],
                }
            )
        return out

    def exists(self, session_id: str) -> bool:
        return self.col.find_one({"session_id": session_id}, {"_id": 1}) is not None

    def count(self, session_id: str) -> int:
        # seqs are taken by the inserts themselves, so they are gap-free from 1 and the highest stored
        # seq is the count; count_documents is a full scan on nx-27017 (~0.4 s at 7k events)
        last = self.col.find_one(
            {"session_id": session_id, "seq": {"$gte": 1}}, {"_id": 0, "seq": 1}, sort=[("seq", DESCENDING)]
        )
        return int(last["seq"]) if last else 0

    def verify_chain(self, session_id: str) -> dict[str, Any]:
        """Walk the session in seq order: seqs contiguous from 1, each event's hash recomputed, each
        prev_hash equal to its predecessor's hash; then compare the log with what the store keeps outside
        it (database/heads.py): its chain head (and its signature, with TRADEGRAPH_AUDIT_KEY set), the cycle
        counter, the execution ledger. Reports the first broken or missing seq; `head` is the head as
        recorded, `head_note` one line on how the log stands against it, `after_head` the events it does not
        cover yet (what a writer killed between its batch and its head update leaves: not a failure)."""
        outside = self.outside(session_id)  # before the log: see Outside
        prev, checked = GENESIS, 0
        hash_at_head: str | None = None
        cycle_last_seq: dict[int, int] = {}
        marks: list[tuple[int, Optional[str]]] = []  # each manifest's (seq, key id it says heads are signed with)
        report: dict[str, Any] = {
            "ok": False,
            "checked": 0,
            "first_broken": None,
            "head": outside.head.public() if outside.head else None,
            "head_note": "",
            "after_head": 0,
        }
        docs, packed = self._read(session_id)
        for pos, doc in enumerate(docs):
            checked += 1
            seq = int(doc["seq"])
            reason = None
            if seq != checked:
                reason = f"seq {checked} is missing (next stored seq is {seq})"
            elif doc.get("hash") is None:
                reason = "event carries no hash (written before the chain existed, or stripped)"
            elif doc.get("prev_hash") != prev:
                reason = "prev_hash does not match the hash of the event before it (an event was removed or replaced)"
            elif packed.get(pos):
                reason = f"its payload cannot be read: {packed[pos]} (the pack was deleted or edited)"
            elif event_hash(doc) != doc["hash"]:
                reason = (
                    "content does not match its hash (the event, or the pack holding its payload, was edited "
                    "after it was written)"
                    if pos in packed
                    else "content does not match its hash (the event was edited after it was written)"
                )
            if reason is not None:
                return {**report, "checked": checked, "first_broken": {"seq": min(seq, checked), "reason": reason}}
            prev = doc["hash"]
            n = cycle_number(session_id, doc.get("cycle_id"))
            if n is not None:
                cycle_last_seq[n] = seq
            if doc.get("kind") == "manifest":
                marks.append((seq, mark_key_id(doc.get("payload"))))
            if outside.head is not None and seq == outside.head.seq:
                hash_at_head = prev
        broken, note, after = compare(
            session_id, outside, LogEnd(checked, hash_at_head, cycle_last_seq, marks), audit_key()
        )
        return {
            **report,
            "ok": broken is None,
            "checked": checked,
            "first_broken": broken,
            "head_note": note,
            "after_head": after,
        }

    def outside(self, session_id: str) -> Outside:
        """What the store keeps about the session outside its log (read before the log, see Outside)."""
        ledger = {}
        for entry in ExecutionLedger(self.db).col.find(
            {"session_id": session_id}, {"_id": 0, "cycle_id": 1, "state": 1}
        ):
            n = cycle_number(session_id, entry.get("cycle_id"))
            if n is not None:
                ledger[n] = str(entry.get("state"))
        counter = self.counters.find_one({"_id": f"{session_id}#cycles"})
        return Outside(self.heads.get(session_id), int(counter["n"]) if counter else 0, ledger)

    def cycle_ids(self, session_id: str) -> list[str]:
        """The session's cycle ids in order (cycle ids are `<session>:c<n>`, numbered by next_cycle)."""
        doc = self.counters.find_one({"_id": f"{session_id}#cycles"})
        return [f"{session_id}:c{i}" for i in range(1, int(doc["n"]) + 1)] if doc else []

    def next_cycle(self, session_id: str) -> int:
        """Allocate the session's next cycle number (1, 2, …) atomically."""
        doc = self.counters.find_one_and_update(
            {"_id": f"{session_id}#cycles"}, {"$inc": {"n": 1}}, upsert=True, return_document=ReturnDocument.AFTER
        )
        assert doc is not None  # an upsert returning the document after it always finds one
        return int(doc["n"])
