"""A persistent LangGraph checkpointer on the same store, for human approval across processes."""
from __future__ import annotations

from database.connection import Store

CHECKPOINT_DB_SUFFIX = "_checkpoints"


def _patch_mongomock() -> None:
    """mongomock's bulk update builder rejects the `sort=` that pymongo 4.9+ UpdateOne passes along;
    it has no meaning for these single-document upserts, so it is accepted and dropped."""
    from mongomock.collection import BulkOperationBuilder

    if getattr(BulkOperationBuilder.add_update, "_tradegraph_patched", False):
        return
    original = BulkOperationBuilder.add_update

    def add_update(self, selector, doc, *args, sort=None, **kwargs):
        return original(self, selector, doc, *args, **kwargs)

    add_update._tradegraph_patched = True
    BulkOperationBuilder.add_update = add_update


def checkpointer(store: Store):
    from langgraph.checkpoint.mongodb import MongoDBSaver

    if store.uri.startswith("mongomock://"):
        _patch_mongomock()
    return MongoDBSaver(store.client, db_name=store.db.name + CHECKPOINT_DB_SUFFIX)
