"""The audit log's packs: the large payloads of each appended batch, stored once, compressed, content-addressed.

Measured on offline backtests (4 bundled symbols, ~200 events a decision point; 20 StockBench symbols, ~1,000),
three quarters of `state_events`' bytes are payloads (LLM prompts with their evidence, contracts, retrieved notes),
mostly unique per event: one evidence block differs from the next by its numbers, so storing equal texts once
removes little (~12%), while the texts of one batch compressed together shrink ~8x (their field names, wording and
figures repeat across the batch's requests, answers, contracts and notes). So: per batch, one pack.

An event whose payload is larger than INLINE_MAX keeps its small fields inline (queryable, readable as before) and
moves its other fields to an entry of the batch's pack (collection `state_blobs`): its payload then holds
`"_pack": "<pack id>:<entry>"` beside the inline fields. A pack's id is the sha256 of its uncompressed bytes (its
entries, one JSON line each, equal entries once); `z` is those bytes compressed with zstd; `sessions` the sessions
whose events reference it. Packs are immutable and inserted before the events that reference them, so no crash
leaves a reference to nothing (at worst a pack nothing references). The hash chain (database/events.py) is computed
over the full event, as read() returns it: editing, swapping or deleting a pack breaks the chain at the first event
that references it. Deleting a session's events, then `release(session)`, deletes the packs no other session uses.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

import orjson
import zstandard
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError
from pymongo.write_concern import WriteConcern

from schemas.event_kinds import PACK_REF

COLLECTION = "state_blobs"
REF = PACK_REF  # the payload key naming an event's pack entry (schemas/event_kinds.py)
INLINE_MAX = 256  # bytes of canonical JSON: a payload up to this size stays whole in its event
# the string fields of a packed payload up to this size stay inline, so a query can still name them (an error's
# type, a transition's target, a tool's name); numbers, flags, lists and longer texts move
FIELD_INLINE_MAX = 48
PACK_MAX = 4 << 20  # uncompressed bytes per pack, far below MongoDB's 16 MB per document
LEVEL = 3  # zstd: ~8x on a batch at ~300 MB/s (zlib -6 compresses as well at a fifth of the speed)
READ_CHUNK = 500  # pack ids per query

_local = threading.local()  # zstd contexts are not thread-safe: one pair per thread


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    ctx = getattr(_local, "zstd", None)
    if ctx is None:
        ctx = _local.zstd = (zstandard.ZstdCompressor(level=LEVEL), zstandard.ZstdDecompressor())
    return ctx


@dataclass(frozen=True)
class Pack:
    id: str
    raw: bytes  # the entries, one JSON line each
    entries: int
    sessions: list[str]  # the sessions whose events reference it


def split(payloads: list[dict[str, Any]], sessions: list[str]) -> tuple[list[Pack], list[dict[str, Any]]]:
    """The packs of a batch's payloads (`sessions[i]` the session of payloads[i]) and each payload's stored form
    (the payload itself when it stays whole). An entry is `[every key of the payload in order, {moved fields}]`,
    so a read gives back the same dict."""
    packs: list[Pack] = []
    lines: list[bytes] = []
    index: dict[bytes, int] = {}
    size = 0
    out: list[dict[str, Any]] = []
    pending: list[tuple[int, dict[str, Any], int]] = []  # (position in out, inline fields, entry)

    def close() -> None:
        nonlocal lines, index, size, pending
        if lines:
            raw = b"\n".join(lines)
            owners = sorted({sessions[pos] for pos, _, _ in pending})
            pack = Pack(hashlib.sha256(raw).hexdigest(), raw, len(lines), owners)
            packs.append(pack)
            for pos, inline, entry in pending:
                out[pos] = {REF: f"{pack.id}:{entry}", **inline}
        lines, index, size, pending = [], {}, 0, []

    for payload in payloads:
        if REF in payload:
            raise ValueError(f"payload key {REF!r} is reserved for the store's pack references")
        if _size(payload) <= INLINE_MAX:
            out.append(payload)
            continue
        inline = {k: v for k, v in payload.items() if isinstance(v, str) and _inline_field(v)}
        # [every key in order, {moved fields}]: orjson writes a list and a dict exactly so, in one call
        line = orjson.dumps([list(payload), {k: v for k, v in payload.items() if k not in inline}])
        if size and size + len(line) > PACK_MAX:
            close()
        entry = index.get(line)
        if entry is None:
            entry = index[line] = len(lines)
            lines.append(line)
            size += len(line) + 1
        out.append(payload)  # replaced by its stored form when its pack closes
        pending.append((len(out) - 1, inline, entry))
    close()
    return packs, out


def _size(payload: dict[str, Any]) -> int:
    """sum(len(key) + len(its value's JSON) + 4) over the fields: the payload's compact JSON less one byte, less
    what a key's JSON holds beyond its characters (escapes, multi-byte UTF-8), from one encoding of the whole."""
    return len(orjson.dumps(payload)) - 1 - _keys_extra(tuple(payload))


@functools.lru_cache(maxsize=4096)
def _keys_extra(keys: tuple[str, ...]) -> int:
    """What these keys' JSON holds beyond their characters and quotes (0 for plain names): the same few key sets
    come back in every batch (one per kind of event)."""
    return sum(len(orjson.dumps(k)) - 2 - len(k) for k in keys)


def _inline_field(value: str) -> bool:
    """The string's JSON is at most FIELD_INLINE_MAX bytes (it has at least its characters and two quotes)."""
    return len(value) + 2 <= FIELD_INLINE_MAX and len(orjson.dumps(value)) <= FIELD_INLINE_MAX


def ref_of(stored: Any) -> Optional[str]:
    """The pack entry a payload, as stored, references, or None (a payload stored whole, or not a dict). The store
    reads this below the typed contracts: the reference is the store's, not the event's."""
    if isinstance(stored, dict):
        ref = stored.get(REF)
        return ref if isinstance(ref, str) else None
    return None


def _merge(stored: dict[str, Any], line: bytes) -> Optional[dict[str, Any]]:
    """The payload rebuilt from its stored form and its entry, or None when the entry is not one. Inline fields win
    (a field set in the stored event behind the store's back shows, and so breaks the chain); an inline field the
    entry does not list comes last."""
    try:
        keys, moved = orjson.loads(line)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return None
    if not isinstance(keys, list) or not isinstance(moved, dict):
        return None
    inline = {k: v for k, v in stored.items() if k != REF}
    out = {}
    for k in keys:
        if k in inline:
            out[k] = inline.pop(k)
        elif k in moved:
            out[k] = moved[k]
    out.update(inline)
    return out


class BlobStore:
    """The `state_blobs` collection: `_id` a pack's sha256, `z` its compressed bytes, `n` its entries."""

    def __init__(self, db: Database, write_concern: Optional[WriteConcern] = None) -> None:
        self.col = db.get_collection(COLLECTION, write_concern=write_concern) if write_concern else db[COLLECTION]

    def put(self, pack: Pack) -> None:
        """Store a pack. One already stored has the same bytes (its id is their hash): its sessions gain these, in
        one atomic update that also proves it is still there (a `release` may have deleted it just before)."""
        doc = {"_id": pack.id, "n": pack.entries, "sessions": pack.sessions, "z": _zstd()[0].compress(pack.raw)}
        for _ in range(3):
            try:
                self.col.insert_one(dict(doc))
                return
            except DuplicateKeyError:
                if self.col.update_one(
                    {"_id": pack.id}, {"$addToSet": {"sessions": {"$each": pack.sessions}}}
                ).matched_count:
                    return
        raise RuntimeError(f"pack {pack.id[:12]}… was deleted three times while being stored")

    def release(self, session_id: str) -> int:
        """After a session's events are deleted: forget it in its packs and delete those no session uses now.
        Returns how many packs were deleted."""
        self.col.update_many({"sessions": session_id}, {"$pull": {"sessions": session_id}})
        return self.col.delete_many({"sessions": {"$size": 0}}).deleted_count

    def expand(self, docs: list[dict[str, Any]], local_file=None) -> dict[int, Optional[str]]:
        """Rebuild, in place, the payload of every event that references a pack. Returns {position in docs: None, or
        why its pack entry cannot be read} for those events; an unreadable one keeps its stored form (its hash then
        fails, and verify_chain names it with the reason)."""
        wanted: dict[str, list[tuple[int, int]]] = {}
        for pos, doc in enumerate(docs):
            ref = ref_of(doc.get("payload"))
            if ref is None:
                continue
            pack_id, _, entry = ref.partition(":")
            # ASCII digits only: "²" is a digit to str.isdigit and not to int(), and one edited reference then
            # raised out of every read and verify of its session instead of being named as a broken event
            index = int(entry) if entry.isascii() and entry.isdigit() else -1
            wanted.setdefault(pack_id, []).append((pos, index))
        if not wanted:
            return {}
        compressed = self._read_local(list(wanted), local_file) if local_file is not None else None
        if compressed is None:
            compressed = self._read(list(wanted))
        found: dict[int, Optional[str]] = {}
        for pack_id, uses in wanted.items():
            lines, reason = _lines(pack_id, compressed.get(pack_id))
            for pos, line in uses:
                payload = _merge(docs[pos]["payload"], lines[line]) if lines and 0 <= line < len(lines) else None
                if payload is None:
                    found[pos] = reason or f"pack {pack_id[:12]}… has no readable entry {line}"
                else:
                    docs[pos]["payload"] = payload
                    found[pos] = None
        return found

    def _read(self, ids: list[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for i in range(0, len(ids), READ_CHUNK):
            for doc in self.col.find({"_id": {"$in": ids[i : i + READ_CHUNK]}}):
                out[str(doc["_id"])] = bytes(doc.get("z") or b"")
        return out

    @staticmethod
    def _read_local(ids: list[str], path) -> Optional[dict[str, bytes]]:
        """The packs straight from the embedded server's SQLite file (see EventStore._read_local), or None to ask
        the server: nx-27017 stores a binary as {"__neosqlite_binary__": true, "data": base64}."""
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error:
            return None
        out: dict[str, bytes] = {}
        try:
            con.text_factory = bytes
            for i in range(0, len(ids), READ_CHUNK):
                chunk = ids[i : i + READ_CHUNK]
                rows = con.execute(f"SELECT data FROM {COLLECTION} WHERE _id IN ({','.join('?' * len(chunk))})", chunk)
                for (raw,) in rows:
                    doc = orjson.loads(raw)
                    z = doc.get("z")
                    if not (isinstance(z, dict) and z.get("__neosqlite_binary__") and isinstance(z.get("data"), str)):
                        return None
                    out[str(doc["_id"])] = base64.b64decode(z["data"])
        except (sqlite3.Error, orjson.JSONDecodeError, ValueError):
            return None
        finally:
            con.close()
        if len(out) < len(ids):
            return None  # not there (yet, or not under that column): the server's answer decides
        return out


def _lines(pack_id: str, compressed: Optional[bytes]) -> tuple[Optional[list[bytes]], Optional[str]]:
    if compressed is None:
        return None, f"pack {pack_id[:12]}… is missing from {COLLECTION}"
    try:
        return _zstd()[1].decompress(compressed).split(b"\n"), None
    except zstandard.ZstdError as exc:
        return None, f"pack {pack_id[:12]}… cannot be decompressed ({exc})"


def packed(docs: Iterable[dict[str, Any]]) -> int:
    """How many of these stored events reference a pack (tests, benchmarks)."""
    return sum(1 for d in docs if ref_of(d.get("payload")) is not None)
