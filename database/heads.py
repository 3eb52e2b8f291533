"""Chain heads: how long each session's hash chain should be, kept outside the log it vouches for.

The hash chain in `state_events` proves that no stored event was edited, removed or reordered, but only up
to the last event stored: deleting the tail (the latest, most embarrassing cycle) leaves a shorter chain that
is still intact. A head (collection `chain_heads`, one document per session) records the seq and hash of the
session's last stored event. The append path moves it after each batch is acknowledged, conditionally, so it
only ever moves forward: two writers racing, a redelivered spool batch, a stale per-process cache can never
lower it. A writer killed between its batch and the head update leaves the log ahead of its head, never
behind it: so a log shorter than its head was cut, and a log longer than its head is what a crash leaves.

With `TRADEGRAPH_AUDIT_KEY` set, each head is signed with HMAC-SHA256 over `canonical()` (its session, seq,
hash, update time and key id, as sorted compact JSON) and carries the key's id (a short hash of the key), so
rewriting both the log and its head needs the key, and a head checked under another key is named as such.

A session written under a key says so inside its log: each cycle's manifest (its first event) carries `audit`
(`signing_mark`: the algorithm and the key's id). It is in the hash chain, so it cannot be removed without breaking
the chain or re-hashing it. A session whose last manifest says its heads are signed must have a signed head: a
deleted head (with the log intact, rewritten and re-hashed, or cut by whole cycles with the counter and ledger
rolled back) is broken, with or without the key set to check it; and with the key set, any session without a head
is broken (nothing signed vouches for it; a log re-hashed from its first manifest on would otherwise pass).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Optional

import orjson
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError
from pymongo.write_concern import WriteConcern

KEY_VAR = "TRADEGRAPH_AUDIT_KEY"
COLLECTION = "chain_heads"
MARK = "audit"  # the manifest's key saying the session's heads are signed, and with which key (signing_mark)
ALG = "HMAC-SHA256"
FORMAT = 1  # the version of canonical()'s encoding


def audit_key() -> Optional[bytes]:
    """The signing key from the environment, or None (unset or empty: heads are written unsigned).
    `check_environment` (agent/config.py) refuses a blank or short one at start-up."""
    value = os.environ.get(KEY_VAR)
    return value.encode() if value else None


def signing_mark() -> Optional[dict[str, str]]:
    """What a manifest records under MARK when this process signs heads, or None without a key."""
    key = audit_key()
    return {"heads": ALG, "key_id": key_id(key)} if key is not None else None


def mark_key_id(stored: Any) -> Optional[str]:
    """The key id a manifest's payload, as stored, says the session's heads are signed with, or None (unsigned).
    The chain check reads what is stored, below the typed contracts: a payload that no longer parses must still be
    hashed and judged, not refused before the chain is."""
    mark = stored.get(MARK) if isinstance(stored, dict) else None
    return str(mark.get("key_id")) if isinstance(mark, dict) and mark.get("key_id") else None


@functools.lru_cache(maxsize=8)
def key_id(key: bytes) -> str:
    """A short public name of a key: enough to tell two keys apart, nothing to guess the key from."""
    return "k-" + hashlib.sha256(b"tradegraph audit key id\x00" + key).hexdigest()[:12]


@dataclass(frozen=True)
class Head:
    session_id: str
    seq: int
    hash: str
    updated: str  # ISO 8601, UTC, to the millisecond (a float would not survive nx-27017's $set exactly)
    key_id: Optional[str] = None
    sig: Optional[str] = None

    def canonical(self) -> bytes:
        """The bytes a signature covers: everything the head says, sorted and compact."""
        return orjson.dumps(
            {
                "format": FORMAT,
                "alg": ALG,
                "session_id": self.session_id,
                "seq": self.seq,
                "hash": self.hash,
                "updated": self.updated,
                "key_id": self.key_id,
            },
            option=orjson.OPT_SORT_KEYS,
        )

    def signed(self, key: bytes) -> Head:
        unsigned = Head(self.session_id, self.seq, self.hash, self.updated, key_id(key))
        return Head(**{**unsigned.__dict__, "sig": hmac.new(key, unsigned.canonical(), hashlib.sha256).hexdigest()})

    def signature_problem(self, key: Optional[bytes]) -> Optional[str]:
        """Why this head cannot be vouched for under `key`, or None. Without a key nothing is checked."""
        if key is None:
            return None
        mine = key_id(key)
        if not self.sig:
            return (
                f"the chain head is not signed, but {KEY_VAR} is set (key id {mine}): it cannot be vouched "
                f"for (written without the key, or its signature stripped)"
            )
        if self.key_id != mine:
            return f"the chain head is signed with key {self.key_id}, not with the configured {KEY_VAR} ({mine})"
        expected = hmac.new(key, self.canonical(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, self.sig):
            return f"the chain head's signature does not verify under {KEY_VAR} ({mine}): the head was edited"
        return None

    def public(self) -> dict[str, Any]:
        """The head as `tradegraph export head` prints it: with the exact bytes signed, so anyone holding the
        key can check it elsewhere, and anyone can notarise it (keep it where the store's writers can't)."""
        out = {
            "session_id": self.session_id,
            "seq": self.seq,
            "hash": self.hash,
            "updated": self.updated,
            "alg": ALG if self.sig else None,
            "key_id": self.key_id,
            "sig": self.sig,
        }
        if self.sig:
            out["signed"] = self.canonical().decode()
        return out

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Head:
        return cls(
            str(doc["session_id"]),
            int(doc["seq"]),
            str(doc["hash"]),
            str(doc["updated"]),
            doc.get("key_id"),
            doc.get("sig"),
        )


class ChainHeads:
    """The `chain_heads` collection: `_id` is the session id."""

    def __init__(self, db: Database, write_concern: Optional[WriteConcern] = None) -> None:
        self.col = db.get_collection(COLLECTION, write_concern=write_concern) if write_concern else db[COLLECTION]

    def advance(self, session_id: str, seq: int, hash_: str) -> None:
        """Record (seq, hash) as the session's head unless the head is already at or past seq. One
        conditional update on `_id` (an atomic compare on the server, so racing writers can only raise it);
        the first head of a session is an insert, which loses to any head inserted meanwhile."""
        key = audit_key()
        head = Head(session_id, int(seq), hash_, datetime.now(UTC).isoformat(timespec="milliseconds"))
        doc = (head.signed(key) if key is not None else head).__dict__
        if self.col.update_one({"_id": session_id, "seq": {"$lt": head.seq}}, {"$set": doc}).matched_count:
            return
        try:
            self.col.insert_one({"_id": session_id, **doc})
        except DuplicateKeyError:
            # a head exists: already at or past seq, or first inserted by a racing writer between the update and
            # the insert (then maybe lower than seq): once more, conditionally
            self.col.update_one({"_id": session_id, "seq": {"$lt": head.seq}}, {"$set": doc})

    def get(self, session_id: str) -> Optional[Head]:
        doc = self.col.find_one({"_id": session_id})
        return Head.from_doc(doc) if doc else None


# ---------------------------------------------------------------------------- comparing a log with its head
def cycle_number(session_id: str, cycle_id: Optional[str]) -> Optional[int]:
    """n of a cycle id `<session>:c<n>` (a ledger key may add `:exits`), or None for any other id."""
    prefix = f"{session_id}:c"
    if not cycle_id or not cycle_id.startswith(prefix):
        return None
    digits = cycle_id[len(prefix) :].split(":", 1)[0]
    return int(digits) if digits.isdigit() else None


@dataclass
class Outside:
    """What the store knows about a session outside its log, read BEFORE the log (a writer appending meanwhile
    can then only put the log ahead of it): its head, how many cycles were allocated, the cycles the execution
    ledger recorded a fill or exit for (each recorded only after its cycle's events were stored)."""

    head: Optional[Head]
    allocated: int
    ledger: dict[int, str]  # cycle number -> ledger state


@dataclass
class LogEnd:
    """What the walk of an intact chain found: its last seq, the hash at the head's seq, each cycle's last seq, and
    each manifest's (seq, key id its heads are signed with, or None)."""

    seq: int
    hash_at_head: Optional[str]
    cycle_last_seq: dict[int, int]
    marks: list[tuple[int, Optional[str]]] = field(default_factory=list)

    def signed_by(self, upto: Optional[int] = None) -> tuple[Optional[int], Optional[str]]:
        """(seq, key id) of the last manifest at or before `upto` (the whole log: None); (None, None) if none."""
        last = [m for m in self.marks if upto is None or m[0] <= upto]
        return last[-1] if last else (None, None)


def compare(session_id: str, outside: Outside, log: LogEnd, key: Optional[bytes]) -> tuple[Optional[dict], str, int]:
    """(first broken {seq, reason} or None, one line on how the log stands against its head, events after the
    head). Only called on a chain intact from seq 1 to log.seq."""
    head, end = outside.head, log.seq
    broken = _signed_session(head, log, key) or _against_head(head, log, key)
    if broken is None:
        broken = _against_cycles(session_id, outside, log)
    notes = []
    after = 0
    if head is None:
        notes.append(
            "no chain head recorded (a session written before chain heads existed, or its head was "
            "deleted): the log's length is not vouched for"
        )
    elif broken is None and head.seq < end:
        after = end - head.seq
        notes.append(
            f"{after} event(s) after the chain head at seq {head.seq} (seq {head.seq + 1}..{end}): what a "
            f"writer stopped between storing a batch and recording its head leaves; the head does not "
            f"vouch for them"
        )
    elif broken is None:
        notes.append(f"the log ends at its chain head, seq {head.seq} ({_signing(head, key)})")
    empty = [n for n in range(1, outside.allocated + 1) if n not in log.cycle_last_seq and n < _last_cycle(log)]
    if empty:
        notes.append(
            f"cycle(s) {', '.join(f'c{n}' for n in empty)} allocated with no events (their process "
            f"stopped before its first batch was stored)"
        )
    if outside.allocated and _last_cycle(log) > outside.allocated:
        notes.append(f"the cycle counter ({outside.allocated}) is behind the log's cycle c{_last_cycle(log)}")
    return broken, "; ".join(notes), after


def _last_cycle(log: LogEnd) -> int:
    return max(log.cycle_last_seq, default=0)


def _signing(head: Head, key: Optional[bytes]) -> str:
    if not head.sig:
        return "unsigned"
    if key is None:
        return f"signed with key {head.key_id}; set {KEY_VAR} to check the signature"
    return f"signature verified, key {head.key_id}"


def _signed_session(head: Optional[Head], log: LogEnd, key: Optional[bytes]) -> Optional[dict]:
    """A session written under a key (its last manifest says so), or any session checked with the key set, has
    a signed head: fail closed when it has none. The signature itself is checked by _against_head (with the key)."""
    at, signer = log.signed_by()
    if head is None and signer is not None:
        return {
            "seq": 1,
            "reason": f"the session was written under {KEY_VAR} (its manifest at seq {at} says its "
            f"chain heads are signed with key {signer}), but it has no chain head: the head "
            f"was deleted, so nothing vouches for the log's content or length",
        }
    if head is None and key is not None and log.seq:
        return {
            "seq": 1,
            "reason": f"no chain head, but {KEY_VAR} is set (key id {key_id(key)}): nothing signed "
            f"vouches for the log's content or length (its head was deleted, or it was "
            f"written before chain heads existed)",
        }
    if head is None or key is not None:
        return None
    # without the key: the head must at least be what the log says it is (signed, by the key its manifest names)
    at, signer = log.signed_by(head.seq)
    if signer is not None and not head.sig:
        return {
            "seq": head.seq,
            "reason": f"the chain head is not signed, but the session's manifest at seq {at} "
            f"says its heads are signed with key {signer}: the head was replaced",
        }
    if signer is not None and head.key_id != signer:
        return {
            "seq": head.seq,
            "reason": f"the chain head is signed with key {head.key_id}, but the session's "
            f"manifest at seq {at} says its heads are signed with key {signer}: the "
            f"head was replaced",
        }
    return None


def _against_head(head: Optional[Head], log: LogEnd, key: Optional[bytes]) -> Optional[dict]:
    if head is None:
        return None
    problem = head.signature_problem(key)
    if problem is not None:
        return {"seq": head.seq, "reason": problem}
    if head.seq > log.seq:
        gone = f"seq {head.seq}" if head.seq == log.seq + 1 else f"seq {log.seq + 1}..{head.seq}"
        return {
            "seq": log.seq + 1,
            "reason": f"the log ends at seq {log.seq}, but its chain head records seq "
            f"{head.seq}: {gone} missing (the log was cut short)",
        }
    if log.hash_at_head != head.hash:
        return {
            "seq": head.seq,
            "reason": f"the event at seq {head.seq} is not the one its chain head records "
            f"(hash {str(log.hash_at_head)[:12]}…, head {head.hash[:12]}…): the log "
            f"was rewritten up to there",
        }
    return None


def _against_cycles(session_id: str, outside: Outside, log: LogEnd) -> Optional[dict]:
    """A cycle with a ledger entry but no event in the log (the entry is written only after the cycle's events
    were stored), or allocated cycles after the log's last one (the last cycle's events removed, its head rolled
    back; or a process that died within its cycle's first batch, which reads the same)."""
    for n, state in sorted(outside.ledger.items()):
        if n not in log.cycle_last_seq:
            before = [s for c, s in log.cycle_last_seq.items() if c < n]
            first = max(before) + 1 if before else 1
            return {
                "seq": first,
                "reason": f"cycle {session_id}:c{n} has an execution-ledger entry ({state}) but "
                f"none of its events is in the log, and a fill is recorded only after "
                f"its cycle's events are stored: they were removed",
            }
    last = _last_cycle(log)
    if outside.allocated > last:
        return {
            "seq": log.seq + 1,
            "reason": f"cycle {session_id}:c{last + 1} was allocated (the cycle counter is "
            f"at {outside.allocated}) but none of its events is in the log, which "
            f"ends at seq {log.seq}: its events were removed (with the head "
            f"rolled back), or its process stopped before its first batch was "
            f"stored",
        }
    return None
