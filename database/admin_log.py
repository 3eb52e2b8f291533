"""The admin log (collection `admin_log`): every deletion of a session, so none is silent and none reads as
tampering.

Append-only records, numbered by `seq` (unique: a racing writer retries from the new end) and hash-chained like
the audit log (`prev_hash`, `hash`: sha256 over the record's canonical JSON), so a record edited or removed
breaks the chain at its seq. With `TRADEGRAPH_AUDIT_KEY` set each record is also HMAC-SHA256 signed over that
JSON and names its key, as chain heads are (database/heads.py): without the key, someone with write access to
the store could forge a record as they could a head; with it, they can't.

A deletion writes two records: `started` before anything is removed (who, when, why, the session's kind, event
and cycle counts, bytes, first and last activity, and its chain head as it stood, signature included), then
`done` with what was removed from each collection. A `started` with no `done` is a deletion cut short: running
it again finishes it.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from datetime import datetime, timezone
from typing import Any, Optional

import orjson
from pymongo import ASCENDING, DESCENDING
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from database.heads import ALG, KEY_VAR, audit_key, key_id

COLLECTION = "admin_log"
GENESIS = "0" * 64
MAX_RACES = 100


def record_hash(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k not in ("_id", "hash", "sig")}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class AdminLog:
    def __init__(self, db: Database) -> None:
        self.col = db[COLLECTION]

    def ensure_indexes(self) -> None:
        self.col.create_index([("seq", ASCENDING)], unique=True, name="seq")
        self.col.create_index([("session_id", ASCENDING)], name="session_id")

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Store the record at the log's next seq, chained and (with a key) signed; returns it as stored."""
        key = audit_key()
        for _ in range(MAX_RACES):
            last = self.col.find_one({}, {"_id": 0, "seq": 1, "hash": 1}, sort=[("seq", DESCENDING)])
            doc = {**record, "seq": int(last["seq"]) + 1 if last else 1, "ts": record.get("ts") or time.time(),
                   "prev_hash": last["hash"] if last else GENESIS, "key_id": key_id(key) if key else None}
            doc["hash"] = record_hash(doc)
            if key is not None:
                doc["sig"] = hmac.new(key, doc["hash"].encode(), hashlib.sha256).hexdigest()
            try:
                self.col.insert_one(dict(doc))
            except DuplicateKeyError:
                continue  # another record took this seq: again from the new end
            return doc
        raise RuntimeError(f"admin log: gave up after {MAX_RACES} seq races")

    def records(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        query = {"session_id": session_id} if session_id else {}
        return list(self.col.find(query, {"_id": 0}).sort("seq", ASCENDING))

    def verify(self) -> dict[str, Any]:
        """Walk the whole log: seqs contiguous from 1, each hash recomputed and chained, each signature checked
        under the configured key. {ok, checked, first_broken: {seq, reason} | None}."""
        key, prev, n = audit_key(), GENESIS, 0
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
                return {"ok": False, "checked": n, "first_broken": {"seq": min(int(doc["seq"]), n), "reason": reason}}
            prev = doc["hash"]
        return {"ok": True, "checked": n, "first_broken": None}

    def deletion_line(self, session_id: str) -> Optional[str]:
        """One line on the session's deletion (when, by whom, what its log was), or None if it was never
        deleted. Says whether the admin log vouches for it: intact and, with a key, signed by it."""
        recs = [r for r in self.records(session_id) if r.get("action") == "delete_session"]
        if not recs:
            return None
        started = next((r for r in reversed(recs) if r.get("phase") == "started"), recs[-1])
        done = next((r for r in recs if r.get("phase") == "done" and r.get("started_seq") == started["seq"]), None)
        head = started.get("head") or {}
        what = (f"{started.get('events', 0)} event(s), {started.get('cycles', 0)} cycle(s); its chain head then: "
                + (f"seq {head.get('seq')}, hash {head.get('hash')}" + (f" (signed, key {head['key_id']})"
                                                                        if head.get("sig") else "")
                   if head else "none recorded"))
        when = f"{_utc(float(started['ts']))} by {started.get('by')}"
        if done is None:
            line = (f"its deletion was started {when} and not finished ({what}); `tradegraph sessions delete "
                    f"{session_id}` finishes it")
        else:
            line = f"deleted {when} ({started.get('reason')}): {what}"
        chain = self.verify()
        if not chain["ok"]:
            vouched = (f"the admin log is broken at record {chain['first_broken']['seq']}: "
                       f"{chain['first_broken']['reason']}")
        elif audit_key() is not None:
            vouched = f"admin record {started['seq']}, signature verified"
        else:
            vouched = (f"admin record {started['seq']}" + (f", signed with key {started['key_id']} (set {KEY_VAR} to "
                                                           f"check it)" if started.get("sig") else ", unsigned"))
        return f"{line}; {vouched}"


def signature_problem(doc: dict[str, Any], key: bytes) -> Optional[str]:
    if not doc.get("sig"):
        return f"the record is not signed, but {KEY_VAR} is set ({ALG} expected)"
    if doc.get("key_id") != key_id(key):
        return f"the record is signed with key {doc.get('key_id')}, not the configured {KEY_VAR} ({key_id(key)})"
    if not hmac.compare_digest(hmac.new(key, doc["hash"].encode(), hashlib.sha256).hexdigest(), doc["sig"]):
        return f"the record's signature does not verify under {KEY_VAR}: it was edited"
    return None
