"""Every command connects, and every connect makes sure of the store's indexes: one createIndexes command a
collection, not one an index (issue 29: 21 round trips to the embedded server made two thirds of a `sessions`
call's; on a loaded machine each waits for the server to be scheduled)."""

from __future__ import annotations

import collections
import uuid

import pytest
from pymongo import monitoring

from database.connection import connect

pytestmark = pytest.mark.integration


class _Commands(monitoring.CommandListener):
    """Counts the commands sent to one database (pymongo's listeners are process-wide and can't be removed)."""

    def __init__(self, db: str) -> None:
        self.db, self.seen = db, collections.Counter[str]()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.database_name == self.db:
            self.seen[str(event.command.get(event.command_name))] += event.command_name == "createIndexes"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_connect_sends_one_create_indexes_a_collection(embedded_uri):
    name = f"test_{uuid.uuid4().hex[:12]}"
    listener = _Commands(name)
    monitoring.register(listener)
    for _ in range(2):  # a new store, then one whose indexes exist
        listener.seen.clear()
        store = connect(f"{embedded_uri}/{name}")
        try:
            sent = {col: n for col, n in listener.seen.items() if n}
            assert sent and set(sent.values()) == {1}, sent
            # every index of the log made by that one command, the unique ones unique
            keys = {
                tuple(k for k, _ in i["key"]): bool(i.get("unique"))
                for i in store.events.col.index_information().values()
            }
            assert {
                ("session_id", "seq"): True,
                ("event_id",): True,
                ("session_id", "cycle_id", "seq"): False,
                ("kind",): False,
                ("session_id",): False,
            }.items() <= keys.items(), keys
        finally:
            store.close()
    with connect(f"{embedded_uri}/{name}") as store:
        store.client.drop_database(name)
