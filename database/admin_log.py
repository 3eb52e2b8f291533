"""The admin log (collection `admin_log`): every deletion of a session, so none is silent and none reads as
tampering.

Append-only records, numbered by `seq` (unique: a racing writer retries from the new end) and hash-chained like
the audit log (`prev_hash`, `hash`: sha256 over the record's canonical JSON), so a record edited or removed
breaks the chain at its seq. With `TRADEGRAPH_AUDIT_KEY` set each record is also HMAC-SHA256 signed over that
JSON and names its key, as chain heads are (database/heads.py): without the key, someone with write access to
the store could forge a record as they could a head; with it, they can't.

The log's end is vouched for by a head (collection `admin_log_head`, one document), moved after each record is
stored exactly as a session's chain head is (database/heads.py: conditionally, only forward, signed with the key):
so removing the last records (the deletion being hidden) leaves a log shorter than its head, and `verify` names
the records missing. A process killed between its record and the head leaves the log one record past its head,
reported, not failed. What no head can catch: the whole log removed together with its head (nothing is left to
compare with), or, without the key, both rewritten consistently by someone with write access to the store.

A deletion writes two records: `started` before anything is removed (who, when, why, the session's kind, event
and cycle counts, bytes, first and last activity, and its chain head as it stood, signature included), then
`done` with what was removed from each collection. A `started` with no `done` is a deletion cut short: running
it again finishes it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from typing import Any, Optional

import orjson
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from database.heads import ALG, KEY_VAR, ChainHeads, Head, audit_key, key_id

COLLECTION = "admin_log"
HEAD_COLLECTION = "admin_log_head"
HEAD_ID = "admin_log"  # the head's `_id` (and the name its signature covers)
GENESIS = "0" * 64
MAX_RACES = 100


def record_hash(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k not in ("_id", "hash", "sig")}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class _Head(ChainHeads):
    """The admin log's head: a chain head kept in a collection of its own (a session's listing counts chain_heads)."""

    def __init__(self, db: Database) -> None:
        self.col = db[HEAD_COLLECTION]


class AdminLog:
    def __init__(self, db: Database) -> None:
        self.col = db[COLLECTION]
        self.heads = _Head(db)

    def ensure_indexes(self) -> None:
        self.col.create_indexes(
            [
                IndexModel([("seq", ASCENDING)], unique=True, name="seq"),
                IndexModel([("session_id", ASCENDING)], name="session_id"),
            ]
        )

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Store the record at the log's next seq, chained and (with a key) signed; returns it as stored."""
        key = audit_key()
        for _ in range(MAX_RACES):
            last = self.col.find_one({}, {"_id": 0, "seq": 1, "hash": 1}, sort=[("seq", DESCENDING)])
            doc = {
                **record,
                "seq": int(last["seq"]) + 1 if last else 1,
                "ts": record.get("ts") or time.time(),
                "prev_hash": last["hash"] if last else GENESIS,
                "key_id": key_id(key) if key else None,
            }
            doc["hash"] = record_hash(doc)
            if key is not None:
                doc["sig"] = hmac.new(key, doc["hash"].encode(), hashlib.sha256).hexdigest()
            try:
                self.col.insert_one(dict(doc))
            except DuplicateKeyError:
                continue  # another record took this seq: again from the new end
            self.heads.advance(HEAD_ID, doc["seq"], doc["hash"])  # after the record: never ahead of the log
            return doc
        raise RuntimeError(f"admin log: gave up after {MAX_RACES} seq races")

    def records(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        query = {"session_id": session_id} if session_id else {}
        return list(self.col.find(query, {"_id": 0}).sort("seq", ASCENDING))

    def head(self) -> Optional[Head]:
        return self.heads.get(HEAD_ID)

    def verify(self) -> dict[str, Any]:
        """Walk the whole log: seqs contiguous from 1, each hash recomputed and chained, each signature checked
        under the configured key; then the log's end against its head (read first: a record appended meanwhile
        can only put the log past it). {ok, checked, first_broken: {seq, reason} | None, head_note}."""
        head = self.head()
        key, prev, n = audit_key(), GENESIS, 0
        hash_at: dict[int, str] = {}
        for doc in self.records():
            n += 1
            reason = None
            if int(doc["seq"]) != n:
                reason = f"record {n} is missing (next stored is {doc['seq']})"
            elif doc.get("prev_hash") != prev:
                reason = "prev_hash does not match the record before it (a record was removed or replaced)"
            elif record_hash(doc) != doc.get("hash"):
                reason = "content does not match its hash (the record was edited)"
            elif key is not None:
                reason = signature_problem(doc, key)
            if reason is not None:
                return {
                    "ok": False,
                    "checked": n,
                    "first_broken": {"seq": min(int(doc["seq"]), n), "reason": reason},
                    "head_note": "",
                }
            prev = doc["hash"]
            if head is not None and n == head.seq:
                hash_at[n] = prev
        broken, note = _against_head(head, n, hash_at.get(head.seq) if head else None, key)
        return {"ok": broken is None, "checked": n, "first_broken": broken, "head_note": note}

    def unknown_session(self, session_id: str) -> str:
        """What every lookup of a session the store does not hold says: `unknown session 'X'`, with its deletion
        when the admin log records one, or the admin log's break when it is broken (a removed record may have been
        that deletion)."""
        message = f"unknown session '{session_id}'"
        gone = self.deletion_line(session_id)
        if gone is not None:
            return f"{message}: {gone}"
        chain = self.verify()
        if not chain["ok"]:
            return (
                f"{message}: no deletion of it is recorded, but the admin log is broken at record "
                f"{chain['first_broken']['seq']} ({chain['first_broken']['reason']}): a removed record may have "
                f"been its deletion"
            )
        return message

    def deletion_line(self, session_id: str) -> Optional[str]:
        """One line on the session's deletion (when, by whom, what its log was), or None if it was never
        deleted. Says whether the admin log vouches for it: intact and, with a key, signed by it."""
        recs = [r for r in self.records(session_id) if r.get("action") == "delete_session"]
        if not recs:
            return None
        started = next((r for r in reversed(recs) if r.get("phase") == "started"), recs[-1])
        done = next((r for r in recs if r.get("phase") == "done" and r.get("started_seq") == started["seq"]), None)
        head = started.get("head") or {}
        what = f"{started.get('events', 0)} event(s), {started.get('cycles', 0)} cycle(s); its chain head then: " + (
            f"seq {head.get('seq')}, hash {head.get('hash')}"
            + (f" (signed, key {head['key_id']})" if head.get("sig") else "")
            if head
            else "none recorded"
        )
        when = f"{_utc(float(started['ts']))} by {started.get('by')}"
        if done is None:
            line = (
                f"its deletion was started {when} and not finished ({what}); `tradegraph sessions delete "
                f"{session_id}` finishes it"
            )
        else:
            line = f"deleted {when} ({started.get('reason')}): {what}"
        chain = self.verify()
        if not chain["ok"]:
            vouched = (
                f"the admin log is broken at record {chain['first_broken']['seq']}: {chain['first_broken']['reason']}"
            )
        elif audit_key() is not None:
            vouched = f"admin record {started['seq']}, signature verified"
        else:
            vouched = f"admin record {started['seq']}" + (
                f", signed with key {started['key_id']} (set {KEY_VAR} to check it)"
                if started.get("sig")
                else ", unsigned"
            )
        return f"{line}; {vouched}"


def _against_head(
    head: Optional[Head], n: int, hash_at_head: Optional[str], key: Optional[bytes]
) -> tuple[Optional[dict[str, Any]], str]:
    """(first broken {seq, reason} or None, a note) for an intact log of n records against its head."""
    if head is None:
        if n == 0:
            return None, "no record and no head: no deletion is recorded"
        return {
            "seq": n,
            "reason": f"the admin log holds {n} record(s) but no head: its head was deleted (the log's "
            f"length is not vouched for; its last records may have been removed with it)",
        }, ""
    problem = head.signature_problem(key)
    if problem is not None:
        return {"seq": head.seq, "reason": problem.replace("chain head", "admin log's head")}, ""
    if head.seq > n:
        gone = f"record {head.seq}" if head.seq == n + 1 else f"records {n + 1}..{head.seq}"
        return {
            "seq": n + 1,
            "reason": f"the admin log ends at record {n}, but its head records {head.seq}: {gone} "
            f"missing (removed from the end)",
        }, ""
    if hash_at_head != head.hash:
        return {
            "seq": head.seq,
            "reason": f"record {head.seq} is not the one the admin log's head records: the log "
            f"was rewritten up to there",
        }, ""
    if head.seq < n:
        return None, (
            f"{n - head.seq} record(s) after the head at {head.seq} (a writer stopped between its record and the head)"
        )
    return None, f"the admin log ends at its head, record {head.seq}"


def signature_problem(doc: dict[str, Any], key: bytes) -> Optional[str]:
    if not doc.get("sig"):
        return f"the record is not signed, but {KEY_VAR} is set ({ALG} expected)"
    if doc.get("key_id") != key_id(key):
        return f"the record is signed with key {doc.get('key_id')}, not the configured {KEY_VAR} ({key_id(key)})"
    if not hmac.compare_digest(hmac.new(key, doc["hash"].encode(), hashlib.sha256).hexdigest(), doc["sig"]):
        return f"the record's signature does not verify under {KEY_VAR}: it was edited"
    return None
