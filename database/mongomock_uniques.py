"""mongomock's unique-index check, made O(1) per write with the same answers.

mongomock 4.3 checks a unique index on every insert and update by running the key as a query over every document
of the collection: O(n) per write, O(n^2) for an append-only log. A 12-cycle backtest on `mongomock://` spent most
of its time there (its audit writer thread held the GIL scanning `state_events`, 1,600 events, twice per insert).

Here each unique index keeps a hash map from its key's values to the ids of the documents written with them. It
is only a list of candidates: each candidate is read back from the collection and matched with mongomock's own
filter (the original check's query), so a document deleted, rolled back or updated to other values since is not
counted. It cannot miss one, because every write that can set a key goes through `_ensure_uniques` (insert,
update, replace, upsert), which files the document under its values once it passes. mongomock puts a written
document into the collection before it checks it and takes it out again when the check fails, so a write's put,
check and rollback run under its collection's lock: a check never counts another writer's document that has not
passed its own yet (two writers of one key were both refused when one of them built the map). A key whose values a hash
map cannot stand for with MongoDB's equality (an array, a subdocument, NaN, a path through an array, another
type), and an index with a partial filter, use mongomock's scan, for that index and collection from then on. A map
lives as long as its index: the first write after the index was dropped (or remade on other keys) drops the map.
tests/unit/test_mongomock_uniques.py runs random writes through both and compares every answer.
"""

from __future__ import annotations

import functools
import math
import threading
from datetime import datetime
from typing import Any

_installed = False
original: Any = None  # mongomock's own check, kept for the differential test
_install_lock = threading.Lock()
_SCALARS = (str, int, float, bool, datetime, type(None))


class _Unhashable(Exception):
    """A value MongoDB's equality and a hash map's would not agree on."""


def _value(doc: dict[str, Any], path: str) -> Any:
    cur: Any = doc
    for part in path.split("."):
        if isinstance(cur, (list, tuple)):
            raise _Unhashable  # a path through an array matches any element's value
        if not isinstance(cur, dict) or part not in cur:
            return None  # missing matches null, as the original's KeyError -> None
        cur = cur[part]
    if isinstance(cur, float) and math.isnan(cur):
        raise _Unhashable
    if not isinstance(cur, _SCALARS) and type(cur).__name__ != "ObjectId":
        raise _Unhashable
    return cur


def _key(doc: dict[str, Any], fields: list[tuple[str, Any]]) -> tuple[Any, ...]:
    return tuple(_value(doc, f) for f, _ in fields)


class _Buckets:
    """One collection store's maps: index name -> key values -> ids; None for an index left to the scan."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held by a whole write (_serialized) and again by its check
        self.maps: dict[tuple[str, str], dict[tuple[Any, ...], set[Any]] | None] = {}


def _buckets(store: Any) -> _Buckets:
    found = store.__dict__.get("_tradegraph_unique_buckets")
    if found is None:
        found = store.__dict__.setdefault("_tradegraph_unique_buckets", _Buckets())
    return found


def _query(new_data: dict[str, Any], fields: list[tuple[str, Any]]) -> dict[str, Any]:
    """The original check's query: the new document's value at each of the key's paths, null where missing."""
    from mongomock import helpers

    query: dict[str, Any] = {}
    for f, _ in fields:
        try:
            query[f] = helpers.get_value_by_dot(new_data, f)
        except KeyError:
            query[f] = None
    return query


def _id_of(doc: dict[str, Any]) -> Any:
    from mongomock import helpers

    return helpers.hashdict(doc["_id"]) if isinstance(doc["_id"], dict) else doc["_id"]


def _mapped(state: _Buckets, store: Any, name: str, index: dict[str, Any], new_data: dict[str, Any]) -> bool:
    """Check one unique index through its map (raising on a duplicate) and file the new document; False when this
    index is left to the scan."""
    from mongomock.collection import DuplicateKeyError
    from mongomock.filtering import filter_applies

    fields = index["key"]
    slot = (name, repr(fields))
    if index.get("partialFilterExpression") is not None:
        state.maps[slot] = None
    if slot in state.maps and state.maps[slot] is None:
        return False
    try:
        ids = state.maps.get(slot)
        if ids is None:
            ids = {}
            for doc in store.documents:
                ids.setdefault(_key(doc, fields), set()).add(_id_of(doc))
            state.maps[slot] = ids
        key = _key(new_data, fields)
    except _Unhashable:
        state.maps[slot] = None
        return False
    if index.get("sparse") and set(key) == {None}:
        return True
    query, own = _query(new_data, fields), _id_of(new_data)
    matches = 0
    for cid in ids.get(key, set()) | {own}:
        doc = store._documents.get(cid)
        if doc is not None and filter_applies(query, doc):
            matches += 1
    if matches > 1:
        raise DuplicateKeyError("E11000 Duplicate Key Error", 11000)
    ids.setdefault(key, set()).add(own)
    return True


def _scanned(coll: Any, index: dict[str, Any], new_data: dict[str, Any]) -> None:
    """mongomock's own check of one index: the key as a query over every document."""
    from mongomock.collection import DuplicateKeyError

    query = _query(new_data, index["key"])
    if index.get("sparse") and set(query.values()) == {None}:
        return
    partial = index.get("partialFilterExpression")
    if partial is not None:
        query = {"$and": [partial, query]}
    if len(list(coll._iter_documents(query))) > 1:
        raise DuplicateKeyError("E11000 Duplicate Key Error", 11000)


def ensure_uniques(coll: Any, new_data: dict[str, Any]) -> None:
    """What replaces Collection._ensure_uniques: new_data is already in the collection, as mongomock has it."""
    store = coll._store
    store._remove_expired_documents()  # as the original's scan does: an expired document is gone
    state = _buckets(store)
    with state.lock:  # check and file at once: two writers of one key cannot both pass
        # a map whose index is gone stops being filed now: dropped, it is dropped too, so an index made again later
        # starts from the documents as they are then, not from a map that missed the writes in between
        for slot in [s for s in state.maps if repr((store.indexes.get(s[0]) or {}).get("key")) != s[1]]:
            del state.maps[slot]
        for name, index in list(store.indexes.items()):
            if index.get("unique") and not _mapped(state, store, name, index, new_data):
                _scanned(coll, index, new_data)


def _serialized(write: Any) -> Any:
    """A mongomock write method, run under its collection's lock: the document it puts in, its unique check and
    the rollback when the check fails, as one step for every other writer."""

    @functools.wraps(write)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _buckets(self._store).lock:
            return write(self, *args, **kwargs)

    return locked


def install() -> None:
    """Replace mongomock's Collection._ensure_uniques and serialize its writes (once per process)."""
    global _installed
    with _install_lock:
        if not _installed:
            from mongomock.collection import Collection

            global original
            original = Collection._ensure_uniques
            Collection._ensure_uniques = ensure_uniques  # type: ignore[method-assign]
            # an upsert's insert runs inside its update: the lock is reentrant
            Collection._insert = _serialized(Collection._insert)  # type: ignore[method-assign]
            Collection._update = _serialized(Collection._update)  # type: ignore[method-assign]
            _installed = True
