"""The local spool: only redelivered to the store it was meant for, never while still being written,
idempotent, and a line torn by a crash does not stop the rest."""

from __future__ import annotations

import json
import uuid

from database.spool import SpoolFile, recover
from tests.helpers import mock_store


def ev(n: int) -> dict:
    return {
        "event_id": uuid.uuid4().hex,
        "session_id": "S",
        "cycle_id": "S:c1",
        "ts": 1_700_000_000.0 + n,
        "state": "RUNNER",
        "kind": "transition",
        "payload": {"n": n},
    }


def test_recover_is_idempotent_and_keeps_order(tmp_path):
    store = mock_store()
    events = [ev(i) for i in range(5)]
    store.events.append(events[:2])  # part of it had landed before the store went away
    spool = SpoolFile(tmp_path, store.target)
    spool.write(events)
    spool.close()
    report = recover(store.events, tmp_path, store.target)
    assert (report.redelivered, report.already_stored, len(report.files)) == (3, 2, 1)
    assert [e["payload"]["n"] for e in store.events.read("S")] == [0, 1, 2, 3, 4]
    assert not list(tmp_path.glob("*.jsonl"))
    assert recover(store.events, tmp_path, store.target).redelivered == 0


def test_recover_skips_other_stores_and_files_in_use(tmp_path):
    store = mock_store()
    other = SpoolFile(tmp_path, "mongodb://elsewhere/db#db")
    other.write([ev(1)])
    other.close()
    live = SpoolFile(tmp_path, store.target)  # still held (flock) by its writer
    live.write([ev(2)])
    report = recover(store.events, tmp_path, store.target)
    assert report.redelivered == 0 and len(report.skipped) == 2 and store.events.count("S") == 0
    live.close()
    assert recover(store.events, tmp_path, store.target).redelivered == 1


def test_a_torn_last_line_is_dropped_not_fatal(tmp_path):
    store = mock_store()
    spool = SpoolFile(tmp_path, store.target)
    spool.write([ev(1), ev(2)])
    spool.close()
    with open(spool.path, "a") as fh:
        fh.write(json.dumps(ev(3))[:40])  # the crash came mid-write: never acknowledged
    assert recover(store.events, tmp_path, store.target).redelivered == 2
