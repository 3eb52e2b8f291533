"""A persistent LangGraph checkpointer on the same store, for human approval across processes."""

from __future__ import annotations

from typing import Any, cast

from database.connection import Store

CHECKPOINT_DB_SUFFIX = "_checkpoints"


def _patch_mongomock() -> None:
    """pymongo 4.9+ UpdateOne hands the bulk builder a `sort=` (None unless the caller gave one), which mongomock
    4.3's builder does not accept: every MongoDBSaver.put_writes failed. MongoDBSaver never sets one (each upsert
    matches one document by its unique key), so None is accepted and dropped; a real sort is refused, not ignored.
    The conformance suite on mongomock fails without it (tests/integration/test_checkpoint_conformance.py)."""
    from mongomock.collection import BulkOperationBuilder

    if getattr(BulkOperationBuilder.add_update, "_tradegraph_patched", False):
        return
    original = BulkOperationBuilder.add_update

    def add_update(self, selector, doc, *args, sort=None, **kwargs):
        if sort is not None:
            raise NotImplementedError(f"mongomock cannot apply an update's sort={sort!r}")
        return original(self, selector, doc, *args, **kwargs)

    patched: Any = add_update
    patched._tradegraph_patched = True
    cast(Any, BulkOperationBuilder).add_update = patched


def checkpointer(store: Store):
    from langgraph.checkpoint.mongodb import MongoDBSaver

    if store.uri.startswith("mongomock://"):
        _patch_mongomock()
    return MongoDBSaver(store.client, db_name=store.db.name + CHECKPOINT_DB_SUFFIX)
