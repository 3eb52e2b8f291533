"""database/mongomock_uniques.py gives mongomock's own answers: random writes through both checks, compared.

Two mongomock collections with the same unique indexes (single, compound, dotted, sparse, partial) take the same
random inserts, updates, replacements, upserts and deletes of keys drawn from a small pool (so they collide): one
checks with mongomock's original scan, one with the hash maps. Every write must raise in both or in neither, and
the collections must end equal. The pool holds what a hash map must not be trusted with (arrays, subdocuments,
NaN, 1 against 1.0 and True, a missing field against null)."""

from __future__ import annotations

import math
import sys
import threading
import types
import uuid

import mongomock
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo.errors import DuplicateKeyError

from database import mongomock_uniques

mongomock_uniques.install()
VALUES = st.sampled_from([1, 1.0, True, 0, "a", "b", None, [1], [1, 2], {"x": 1}, math.nan, "missing"])
INDEXES = [
    ({"keys": [("k", 1)], "unique": True}),
    ({"keys": [("k", 1), ("j", 1)], "unique": True, "name": "kj"}),
    ({"keys": [("sub.v", 1)], "unique": True}),
    ({"keys": [("j", 1)], "unique": True, "sparse": True}),
    ({"keys": [("p", 1)], "unique": True, "partialFilterExpression": {"p": {"$gt": 0}}}),
]
NAMES = [spec.get("name") or mongomock.helpers.gen_index_name(spec["keys"]) for spec in INDEXES]


def _doc(k, j, v, p):
    doc = {"k": k, "j": j, "sub": {"v": v}, "p": p}
    return {f: x for f, x in doc.items() if x != "missing" and x != {"v": "missing"}}


DOCS = st.builds(_doc, VALUES, VALUES, VALUES, st.sampled_from([1, 2, -1, "missing"]))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 5), DOCS),
        st.tuples(st.just("update"), st.integers(0, 5), DOCS),
        st.tuples(st.just("replace"), st.integers(0, 5), DOCS),
        st.tuples(st.just("upsert"), st.integers(0, 5), DOCS),
        st.tuples(st.just("delete"), st.integers(0, 5), DOCS),
        # an index dropped, and made again, by its place in INDEXES: the writes in between must count after
        st.tuples(st.just("drop_index"), st.integers(0, len(INDEXES) - 1), DOCS),
        st.tuples(st.just("create_index"), st.integers(0, len(INDEXES) - 1), DOCS),
    ),
    max_size=25,
)


def _collections(pre_existing: list[dict]):
    made = []
    for checked_by in ("scan", "maps"):
        coll = mongomock.MongoClient()[f"u_{uuid.uuid4().hex[:8]}"][checked_by]
        if pre_existing:
            coll.insert_many([dict(d) for d in pre_existing])  # documents older than the indexes
        if checked_by == "scan":
            coll._ensure_uniques = types.MethodType(mongomock_uniques.original, coll)
        made.append(coll)
    return made


def _create(coll, spec):
    return coll.create_index(spec["keys"], **{k: v for k, v in spec.items() if k != "keys"})


def _apply(coll, op, i, doc):
    if op == "drop_index":
        coll.drop_index(NAMES[i])
    elif op == "create_index":
        _create(coll, INDEXES[i])
    elif op == "insert":
        coll.insert_one({"_id": i, **doc})
    elif op == "update":
        coll.update_one({"_id": i}, {"$set": doc})
    elif op == "replace":
        coll.replace_one({"_id": i}, doc)
    elif op == "upsert":
        coll.update_one({"_id": i}, {"$set": doc}, upsert=True)
    else:
        coll.delete_one({"_id": i})


def _state(coll):
    return repr(sorted(coll.find(), key=lambda d: d["_id"]))  # repr: NaN equals itself here


@settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, pre=st.lists(st.integers(100, 103), max_size=3, unique=True))
def test_random_writes_get_the_same_answers_as_mongomocks_scan(ops, pre):
    scan, maps = _collections([{"_id": n, "k": n} for n in pre])
    for spec in INDEXES:
        results = []
        for coll in (scan, maps):
            try:
                _create(coll, spec)
                results.append(None)
            except Exception as e:  # noqa: BLE001
                results.append(type(e).__name__)
        assert results[0] == results[1]
    for op, i, doc in ops:
        answers = []
        for coll in (scan, maps):
            try:
                _apply(coll, op, i, dict(doc))
                answers.append("ok")
            except Exception as e:  # noqa: BLE001 - mongomock's own TypeErrors too: the same in both
                answers.append(type(e).__name__)
        assert answers[0] == answers[1], (op, i, doc, _state(scan))
        assert _state(scan) == _state(maps)


def test_a_duplicate_is_refused_after_the_first_was_deleted_and_written_again():
    coll = mongomock.MongoClient()[f"u_{uuid.uuid4().hex[:8]}"].d
    coll.create_index([("event_id", 1)], unique=True)
    coll.insert_one({"_id": 1, "event_id": "e1"})
    coll.delete_one({"_id": 1})
    coll.insert_one({"_id": 2, "event_id": "e1"})  # the deleted one is no longer counted
    coll.update_one({"_id": 2}, {"$set": {"event_id": "e2"}})
    coll.insert_one({"_id": 3, "event_id": "e1"})  # nor the value it was updated away from
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"_id": 4, "event_id": "e2"})  # the value it was updated to is
    assert sorted(d["_id"] for d in coll.find()) == [2, 3]


def test_an_index_dropped_and_made_again_counts_what_was_written_while_it_was_gone():
    coll = mongomock.MongoClient()[f"u_{uuid.uuid4().hex[:8]}"].d
    coll.create_index([("k", 1)], unique=True, name="k")
    coll.insert_one({"_id": 1, "k": 1})  # the index's map is made here
    coll.drop_index("k")
    coll.insert_one({"_id": 2, "k": 2})  # no unique index: nothing checks or files it
    coll.create_index([("k", 1)], unique=True, name="k")
    with pytest.raises(DuplicateKeyError):  # a map kept across the drop missed _id 2, and let this in
        coll.insert_one({"_id": 3, "k": 2})
    coll.drop_index("k")
    coll.create_index([("k", 1), ("j", 1)], unique=True, name="k")  # the same name on other keys
    coll.insert_one({"_id": 4, "k": 3, "j": 1})  # filed under the (k, j) index only
    coll.drop_index("k")
    coll.create_index([("k", 1)], unique=True, name="k")
    with pytest.raises(DuplicateKeyError):  # the first map of "k" was made before _id 4
        coll.insert_one({"_id": 5, "k": 3})
    assert sorted(d["_id"] for d in coll.find()) == [1, 2, 4]


def test_two_threads_writing_one_key_store_it_once():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often, so an unlocked check and file would interleave
    try:
        _race()
    finally:
        sys.setswitchinterval(old)


def _race():
    db = mongomock.MongoClient()[f"u_{uuid.uuid4().hex[:8]}"]
    for round_ in range(200):
        # a fresh collection each round: its first write builds the map, while the other writer's document is
        # already in the collection, unchecked (before writes were serialized, both writers were refused then)
        coll = db[f"r{round_}"]
        coll.create_index([("seq", 1)], unique=True)
        barrier, outcomes = threading.Barrier(2), []

        def write(n, round_=round_, barrier=barrier, outcomes=outcomes, coll=coll):
            barrier.wait()
            try:
                coll.insert_one({"_id": f"{round_}-{n}", "seq": round_})
                outcomes.append("ok")
            except DuplicateKeyError:
                outcomes.append("duplicate")

        threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert coll.count_documents({"seq": round_}) == 1, outcomes
