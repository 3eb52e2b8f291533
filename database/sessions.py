"""Session summaries (collection `sessions`): what `tradegraph sessions` lists, without reading the log.

One document per session (`_id` the session id): its kind (run, backtest, replay, studio, other), when it started
and was last written, how many events, bytes and cycles it holds, its last event's cycle, kind and state, its last
cycle's status, symbols and as-of, and for a replay the session it replays. `seq` is the highest seq the summary
covers.

The summary is a cache of the log, never its truth. It is a fold over the session's events in seq order, moved
on from the seq it covers by compare-and-set (`seq` unchanged since it was read), so two processes folding one
session can never count an event twice; `tradegraph store reindex` folds every session again from the log and
replaces what a crash left behind.

Staying current without reading back what was just written: the Store's event log (`SummarisedEvents`) keeps,
per session, the events this process appended and not yet folded. `fold(session)` takes those, reads from the
log only the seqs it did not see (what another process wrote, a writer killed before it folded) and the last
cycle's earlier events when that cycle began before the covered seq (an approval resuming a paused cycle). Who
folds: every writer `Store.writer()` hands out, when it closes (a cycle, an approval, a refusal, a backtest's
markers, the idempotency and telemetry records), replay and Studio (they build their own writers) for theirs, and
`Store.close()` for whatever is left. A process killed before it folded leaves the summary behind its log: the
listing says by how much (the session's chain head is further on), the session's next fold catches up, and
`store reindex` rebuilds.

The last cycle's status is read the way replay reads it: the graph layer registers that reading
(`use_cycle_reader`, graph/machine/recording.py), since this layer may not import it; with none registered a fold
waits (the listing then shows the session behind).
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import orjson
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError, PyMongoError

from database.events import EventStore, event_hash
from database.heads import KEY_VAR, Head, audit_key, cycle_number
from database.writer import BufferedEventWriter

COLLECTION = "sessions"
KINDS = ("run", "backtest", "replay", "studio", "other")
# how each writer names its sessions: `run` s-<hex>, a backtest bt-<run id> (sweeps and benchmarks too),
# `replay --verify` replay-<session>-<n>, Studio studio-<thread>
_PREFIXES = (("s-", "run"), ("bt-", "backtest"), ("replay-", "replay"), ("studio-", "studio"))
MAX_RACES = 50
# above this many unseen events a fold reads the whole session (one fast read) rather than cycle by cycle
WHOLE_READ_AT = 2000
# events of one session kept in memory for its next fold; beyond, the fold reads them back from the log
MAX_SEEN = 50_000

# (session id, the last cycle's events in seq order) -> {status, symbols, as_of, replay_of}
CycleReader = Callable[[str, list[dict[str, Any]]], dict[str, Any]]
_reader: Optional[CycleReader] = None


def use_cycle_reader(reader: CycleReader) -> None:
    """How a fold reads the last cycle's status (graph/machine/recording.py registers the recording reader's)."""
    global _reader
    _reader = reader


def session_kind(session_id: str) -> str:
    return next((kind for prefix, kind in _PREFIXES if session_id.startswith(prefix)), "other")


def event_bytes(doc: dict[str, Any]) -> int:
    """An event's size as compact JSON, as the log returns it (without the store's own `_id`)."""
    return len(orjson.dumps({k: v for k, v in doc.items() if k != "_id"}))


# ------------------------------------------------------------------------------ what this process appended
class Seen:
    """Per session, the events this process appended and no fold has taken yet (thread-safe: the audit
    writer's thread adds, whoever folds takes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: dict[str, dict[int, dict[str, Any]]] = {}
        # the summary this process last wrote, per session (SessionSummaries._fold_once)
        self.summaries: dict[str, dict[str, Any]] = {}

    def add(self, docs: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            for d in docs:
                got = self._by_session.setdefault(d["session_id"], {})
                if len(got) < MAX_SEEN:  # past it the fold reads the rest from the log
                    got[int(d["seq"])] = d

    def after(self, session_id: str, seq: int) -> dict[int, dict[str, Any]]:
        with self._lock:
            return {s: d for s, d in self._by_session.get(session_id, {}).items() if s > seq}

    def drop(self, session_id: str, upto: int) -> None:
        with self._lock:
            got = self._by_session.get(session_id)
            if got is None:
                return
            for s in [s for s in got if s <= upto]:
                del got[s]
            if not got:
                del self._by_session[session_id]

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._by_session)


class SummarisedEvents(EventStore):
    """The audit log, noting what this process appended for the summaries' next fold (see the module doc).
    Only newly stored events come back from append (a redelivered one is a no-op), so nothing is noted twice."""

    def __init__(self, db: Database, **options: Any) -> None:
        super().__init__(db, **options)
        self.seen = Seen()

    def append(self, events):
        written = super().append(events)
        self.seen.add(written)
        return written


class FoldingWriter(BufferedEventWriter):
    """Store.writer()'s writer: on close, the sessions it wrote are folded into their summaries (after the
    close, whatever it raised: a spooled tail is simply not in the log yet)."""

    def __init__(self, summaries: SessionSummaries, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._summaries = summaries
        self._wrote: set[str] = set()

    def put(self, event: dict[str, Any]) -> None:
        super().put(event)
        self._wrote.add(event["session_id"])

    def close(self) -> None:
        try:
            super().close()
        finally:
            for session_id in sorted(self._wrote):
                self._summaries.fold(session_id)


# ------------------------------------------------------------------------------ the summaries
@dataclass
class Listing:
    sessions: list[dict[str, Any]]
    # session id -> events its log holds past the summary (its chain head is further on)
    behind: dict[str, int] = field(default_factory=dict)
    # at least this many sessions have a chain head but no summary (a first cycle still running, a writer killed
    # in its first cycle, a store written before summaries existed)
    unsummarised: int = 0
    # session id -> why its listed status is not vouched for (its last summarised event edited, gone or not the one
    # its chain head records; with TRADEGRAPH_AUDIT_KEY, a head missing or not signed by it): see _doubts
    doubt: dict[str, str] = field(default_factory=dict)


class SessionSummaries:
    def __init__(self, db: Database, events: EventStore) -> None:
        # the log's write concern (w=1 on a single node: nx-27017 would otherwise fsync every update)
        self.col = db.get_collection(COLLECTION, write_concern=events.col.write_concern)
        self.events = events

    def ensure_indexes(self) -> None:
        self.col.create_indexes(
            [
                IndexModel([("last_ts", DESCENDING)], name="last_ts"),
                IndexModel([("kind", ASCENDING), ("last_ts", DESCENDING)], name="kind_last_ts"),
            ]
        )

    # ---- reads: never the log
    def get(self, session_id: str) -> Optional[dict[str, Any]]:
        return self.col.find_one({"_id": session_id})

    def list(
        self, limit: int, *, replays: bool = False, kind: Optional[str] = None, status: Optional[str] = None
    ) -> Listing:
        """The `limit` most recently written sessions, replay sessions only when asked, of one kind and last status
        when given: three small indexed reads (summaries, the listed sessions' chain heads, two collection counts),
        none of the log."""
        query: dict[str, Any] = {} if replays else {"kind": {"$ne": "replay"}}
        if kind is not None:
            query["kind"] = kind
        if status is not None:
            query["status"] = status
        docs = list(self.col.find(query).sort("last_ts", DESCENDING).limit(int(limit)))
        heads = {h["_id"]: h for h in self.events.heads.col.find({"_id": {"$in": [d["_id"] for d in docs]}})}
        head_seq = {sid: int(h["seq"]) for sid, h in heads.items()}
        behind = {
            d["_id"]: head_seq[d["_id"]] - int(d["seq"]) for d in docs if head_seq.get(d["_id"], 0) > int(d["seq"])
        }
        # the collections' own counts (SQL's COUNT(*) on the embedded store, metadata on MongoDB), not a scan
        missing = self.events.heads.col.estimated_document_count() - self.col.estimated_document_count()
        return Listing([public(d) for d in docs], behind, max(0, missing), self._doubts(docs, heads))

    @staticmethod
    def _doubts(docs: builtins.list[dict[str, Any]], heads: dict[str, dict[str, Any]]) -> dict[str, str]:
        """A summary is a cache of the log: its status is shown as the log's only while nothing says the log moved
        under it, from what the listing reads anyway (no read of the log): the hash chain broken when it was last
        rebuilt from the log (`store reindex`), the head recording another event at the seq the summary ends at, and
        with the audit key set a head missing or not signed by it. A consistent rewrite of log and head without the
        key passes here (as it does --check-chain); `replay --verify` compares the statuses themselves."""
        key = audit_key()
        out: dict[str, str] = {}
        for d in docs:
            sid, head = d["_id"], heads.get(d["_id"])
            why = None
            if key is not None and head is None:
                why = f"no chain head, but {KEY_VAR} is set"
            elif key is not None and head is not None:
                why = Head.from_doc({**head, "session_id": sid}).signature_problem(key)
            if why is None and d.get("chain_broken"):
                why = f"its log failed its hash chain when last rebuilt ({d['chain_broken']})"
            if (
                why is None
                and head is not None
                and d.get("hash")
                and int(head["seq"]) == int(d["seq"])
                and head.get("hash") != d["hash"]
            ):
                why = f"the event its summary ends at (seq {d['seq']}) is not the one its chain head records"
            if why is not None:
                out[sid] = why
        return out

    def older_than(self, cutoff_ts: float, kind: Optional[str] = None) -> builtins.list[dict[str, Any]]:
        """Sessions last written before cutoff_ts (oldest first), of one kind or any."""
        query: dict[str, Any] = {"last_ts": {"$lt": cutoff_ts}}
        if kind is not None:
            query["kind"] = kind
        return [public(d) for d in self.col.find(query).sort("last_ts", ASCENDING)]

    def replays_of(self, session_id: str) -> builtins.list[dict[str, Any]]:
        return [public(d) for d in self.col.find({"kind": "replay", "replay_of": session_id})]

    def remove(self, session_id: str) -> int:
        seen = getattr(self.events, "seen", None)
        if seen is not None:
            seen.summaries.pop(session_id, None)
        return self.col.delete_many({"_id": session_id}).deleted_count

    # ---- folding the log into them
    def fold(self, session_id: str) -> Optional[str]:
        """Bring the session's summary up to its log's end (see the module doc). Never raises: the summary is a
        cache, and a cycle must not fail on it; returns the reason it could not, or None."""
        reader = _reader
        if reader is None:
            return "no cycle reader registered (graph/machine/recording.py): the summary waits for the next fold"
        try:
            for attempt in range(MAX_RACES):
                if self._fold_once(session_id, reader, cached=attempt == 0):
                    return None
            return f"session {session_id!r}: gave up after {MAX_RACES} concurrent folds"
        except PyMongoError as e:
            # not kept for a retry: with the store gone every later try (Store.close's too) would wait out its
            # timeout; the events are in the log (or its spool), and the next fold reads them from there
            seen = getattr(self.events, "seen", None)
            if seen is not None:
                seen.drop(session_id, upto=2**62)
                seen.summaries.pop(session_id, None)
            return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"

    def fold_all(self) -> None:
        """Fold every session this process appended to and has not folded (Store.close)."""
        seen = getattr(self.events, "seen", None)
        for session_id in seen.sessions() if seen is not None else []:
            self.fold(session_id)

    def _fold_once(self, session_id: str, reader: CycleReader, cached: bool) -> bool:
        """One compare-and-set step; False when another fold moved the summary first (then read it again). The
        summary this process last wrote stands in for reading it (`cached`): the compare-and-set finds out if
        another process moved it since. A cycle's fold is then one update."""
        seen = getattr(self.events, "seen", None)
        prior = seen.summaries.get(session_id) if (cached and seen is not None) else None
        if prior is None:
            prior = self.get(session_id)
        covered = int(prior["seq"]) if prior else 0
        new = seen.after(session_id, covered) if seen is not None else {}
        if new:
            top = max(new)  # what another process wrote after it is its own writer's to fold
        else:  # nothing of ours: the log's end as its chain head records it (one read by _id)
            head = self.events.heads.get(session_id)
            top = head.seq if head is not None else 0
        if top <= covered:
            return True
        unseen = [s for s in range(covered + 1, top + 1) if s not in new]
        if unseen:
            new.update(self._read_seqs(session_id, covered, top, unseen))
        events = [new[s] for s in sorted(new) if covered < s <= top]
        if not events:
            return True
        doc = summarise(session_id, prior, events, self._cycle_started_before, self._last_cycle, reader)
        if prior is None:
            try:
                self.col.insert_one(doc)
            except DuplicateKeyError:
                return False
        elif not self.col.update_one({"_id": session_id, "seq": covered}, {"$set": doc}).matched_count:
            return False
        if seen is not None:
            seen.drop(session_id, int(doc["seq"]))
            seen.summaries[session_id] = doc
        return True

    def _read_seqs(self, session_id: str, covered: int, top: int, unseen: builtins.list[int]) -> dict[int, dict]:
        """The unseen events of (covered, top], through the log's own reads (its content as it returns it)."""
        want = set(unseen)
        if len(unseen) >= WHOLE_READ_AT:
            docs = self.events.read(session_id)
        else:
            # which cycles hold them: top-level fields only, then each such cycle read whole
            lo, hi = min(unseen), max(unseen)
            rows = self.events.col.find(
                {"session_id": session_id, "seq": {"$gte": lo, "$lte": hi}}, {"_id": 0, "seq": 1, "cycle_id": 1}
            )
            cycles = sorted({r["cycle_id"] for r in rows if int(r["seq"]) in want})
            docs = [d for c in cycles for d in self.events.read(session_id, cycle_id=c)]
        return {int(d["seq"]): d for d in docs if int(d["seq"]) in want and covered < int(d["seq"]) <= top}

    def _cycle_started_before(self, session_id: str, cycle_id: str, seq: int) -> bool:
        return (
            self.events.col.find_one({"session_id": session_id, "cycle_id": cycle_id, "seq": {"$lte": seq}}, {"_id": 1})
            is not None
        )

    def _last_cycle(self, session_id: str, cycle_id: str) -> builtins.list[dict[str, Any]]:
        return self.events.read(session_id, cycle_id=cycle_id)

    # ---- rebuilding from the log
    def rebuild(self, session_id: str) -> Optional[dict[str, Any]]:
        """The session's summary folded from its whole log, stored over whatever was there unless a fold has
        meanwhile gone further (then that one stands); the stored summary, or None for a session with no event
        (its summary, if any, removed)."""
        reader = _reader
        if reader is None:
            raise RuntimeError("no cycle reader registered: import graph.machine.recording first")
        events = self.events.read(session_id)
        if not events:
            self.remove(session_id)
            return None
        doc = summarise(session_id, None, events, lambda *_: False, lambda *_: [], reader)
        broken = _chain_break(events)
        if broken is not None:  # the listing marks a status read from a broken log (a chain never heals)
            doc["chain_broken"] = broken
        try:
            self.col.insert_one(doc)
        except DuplicateKeyError:
            if not self.col.update_one({"_id": session_id, "seq": {"$lte": doc["seq"]}}, {"$set": doc}).matched_count:
                self._lower(session_id, doc)
        return self.get(session_id)

    def _lower(self, session_id: str, doc: dict[str, Any]) -> None:
        """The stored summary covers more than the log read holds. A writer that went on since the read leaves
        the log past it (that summary stands: its fold is newer); otherwise the log lost events (removed, or a
        summary edited up) and the summary comes down to the log, by compare-and-set on the seq it had."""
        stored = self.get(session_id)
        if stored is None or self.events.count(session_id) > int(doc["seq"]):
            return
        self.col.update_one({"_id": session_id, "seq": stored["seq"]}, {"$set": doc})
        seen = getattr(self.events, "seen", None)
        if seen is not None:  # this process's cached summary would otherwise stand in for the lowered one
            seen.summaries.pop(session_id, None)

    def reindex(self, progress: Optional[Callable[[int, int], None]] = None) -> dict[str, Any]:
        """Every session's summary rebuilt from the log; summaries of sessions with no event removed. Returns
        {sessions, events, corrected, removed, seconds}: corrected counts summaries that differed from the log."""
        t0 = time.perf_counter()
        ids = sorted(self.events.col.distinct("session_id"))
        before = {d["_id"]: d for d in self.col.find({})}
        corrected = events = 0
        for i, session_id in enumerate(ids):
            doc = self.rebuild(session_id)
            if doc is not None:
                events += int(doc["events"])
                was = before.pop(session_id, None)
                if was is None or _facts(was) != _facts(doc):
                    corrected += 1
            if progress is not None:
                progress(i + 1, len(ids))
        removed = sum(self.remove(session_id) for session_id in before if session_id not in ids)
        return {
            "sessions": len(ids),
            "events": events,
            "corrected": corrected,
            "removed": removed,
            "seconds": round(time.perf_counter() - t0, 3),
        }


_VOLATILE = ("updated_ts",)


def _chain_break(events: builtins.list[dict[str, Any]]) -> Optional[str]:
    """Where a whole session read in seq order breaks its hash chain ("seq N: why"), or None: the walk
    EventStore.verify_chain makes, on the events a rebuild reads anyway (the head is compared by the listing)."""
    prev = "0" * 64
    for n, e in enumerate(events, start=1):
        if int(e["seq"]) != n:
            return f"seq {n}: missing"
        if e.get("prev_hash") != prev or event_hash(e) != e.get("hash"):
            return f"seq {n}: edited, removed or replaced"
        prev = e["hash"]
    return None


def _facts(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in _VOLATILE}


def public(doc: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k != "_id"}
    out.setdefault("session_id", doc["_id"])
    return out


def summarise(
    session_id: str,
    prior: Optional[dict[str, Any]],
    events: list[dict[str, Any]],
    started_before: Callable[[str, str, int], bool],
    read_cycle: Callable[[str, str], list[dict]],
    reader: CycleReader,
) -> dict[str, Any]:
    """The summary after `events` (the session's events after prior's seq, in seq order). A cycle counts once:
    it is new unless it is prior's last cycle or has an event at or before prior's seq. The last cycle's facts
    come from its events here when it began here, else from the whole cycle read from the log."""
    covered = int(prior["seq"]) if prior else 0
    last = events[-1]
    known = {prior.get("last_cycle_id")} if prior else set()
    # cycle numbers are allocated in order (<session>:c<n>), so one above every number counted is new without a
    # query: every event at or before `covered` was folded, and with it its cycle's number
    top_n = int((prior or {}).get("max_cycle") or 0)
    new_cycles, ids = 0, []
    for e in events:
        if e["cycle_id"] not in ids:
            ids.append(e["cycle_id"])
    for cycle_id in ids:
        n = cycle_number(session_id, cycle_id)
        fresh = (n is not None and n > top_n) if cycle_id not in known else False
        if fresh or (cycle_id not in known and not (covered and started_before(session_id, cycle_id, covered))):
            new_cycles += 1
        else:
            known.add(cycle_id)
        top_n = max(top_n, n or 0)
    last_cycle = last["cycle_id"]
    cycle_events = [e for e in events if e["cycle_id"] == last_cycle]
    if last_cycle in known:  # it began before this fold's events: read it whole
        cycle_events = read_cycle(session_id, last_cycle) or cycle_events
    facts = reader(session_id, cycle_events)
    ts = [float(e["ts"]) for e in events]
    first_ts = min(ts + ([float(prior["first_ts"])] if prior and prior.get("first_ts") is not None else []))
    return {
        "_id": session_id,
        "session_id": session_id,
        "kind": session_kind(session_id),
        "seq": int(last["seq"]),
        "events": (int(prior["events"]) if prior else 0) + len(events),
        "bytes": (int(prior["bytes"]) if prior else 0) + sum(event_bytes(e) for e in events),
        "cycles": (int(prior["cycles"]) if prior else 0) + new_cycles,
        "max_cycle": top_n,
        "first_ts": first_ts,
        "last_ts": max(ts + ([float(prior["last_ts"])] if prior else [])),
        "last_cycle_id": last_cycle,
        "last_kind": last.get("kind"),
        "last_state": last.get("state"),
        "status": facts.get("status"),
        "symbols": list(facts.get("symbols") or []),
        "as_of": facts.get("as_of"),
        "replay_of": facts.get("replay_of") or (prior or {}).get("replay_of"),
        "hash": last.get("hash"),  # the event it ends at, as the chain head records it (SessionSummaries._doubts)
        "updated_ts": time.time(),
    }
