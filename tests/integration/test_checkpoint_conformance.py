"""LangChain's checkpointer conformance suite (langgraph-checkpoint-conformance) against our checkpointer
(database/checkpoint.py: MongoDBSaver) on each backend, run the way the package documents: a factory
registered with `checkpointer_test`, then `validate`, which runs every capability's spec tests on a fresh saver.

On the embedded store this holds the server's metadata-filter translation (database/nx_27017_server.py,
change 4: before it, every `list` with a filter failed); on mongomock, the bulk-update patch in
database/checkpoint.py (without it every `put_writes` failed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, DetectedCapabilities

from database import Store
from database.checkpoint import CHECKPOINT_DB_SUFFIX, checkpointer


def test_checkpointer_passes_the_conformance_suite(store: Store, request: pytest.FixtureRequest) -> None:
    # the spec tests use fresh uuid thread ids, so one checkpoint database serves every capability's saver
    @checkpointer_test(name=f"MongoDBSaver on {request.node.callspec.id}")
    async def saver() -> AsyncIterator:
        yield checkpointer(store)

    try:
        report = asyncio.run(validate(saver))
    finally:
        store.client.drop_database(store.db.name + CHECKPOINT_DB_SUFFIX)

    failures = [f for result in report.results.values() for f in result.failures]
    assert failures == [], "\n".join(failures)
    ran = {name: r.tests_passed for name, r in report.results.items() if r.detected}
    # every required capability was found on the saver and its tests ran (not skipped as "not implemented")
    assert {c.value for c in BASE_CAPABILITIES} <= set(ran), ran
    assert all(ran[c.value] > 0 for c in BASE_CAPABILITIES), ran
    # and nothing the saver implements was left out
    assert set(ran) == {c.value for c in DetectedCapabilities.from_instance(checkpointer(store)).detected}
    assert report.passed_all()


def test_mongomock_refuses_an_update_sort_it_cannot_apply() -> None:
    """The mongomock patch drops only the `sort=None` pymongo always passes; a real sort is refused, never
    silently ignored (mongomock would update whichever document came first)."""
    from pymongo import UpdateOne

    from database import connect

    s = connect("mongomock://sort_probe")
    try:
        checkpointer(s)  # installs the patch
        coll = s.db["probe"]
        coll.insert_many([{"k": 1, "n": 1}, {"k": 1, "n": 2}])
        coll.bulk_write([UpdateOne({"k": 1, "n": 2}, {"$set": {"seen": True}})])
        assert coll.find_one({"seen": True})["n"] == 2
        with pytest.raises(NotImplementedError, match="sort"):
            coll.bulk_write([UpdateOne({"k": 1}, {"$set": {"last": True}}, sort={"n": -1})])
    finally:
        s.close()
