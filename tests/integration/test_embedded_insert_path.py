"""The embedded server's insert path (database/nx_27017_server.py) and the write concerns EventStore sends it.

Proven against real servers, not mocks: the patched server stores byte for byte what plain nx-27017 stores
(an ordered insert with a duplicate included); each insert command is one SQLite transaction, so a server
killed with SIGKILL while a writer appends leaves a contiguous, chain-intact prefix holding every
acknowledged event; and (strace on the server) inserts are not fsynced one document at a time while the
durability barrier (`EventStore.sync`) is.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from bson import Binary, Int64, ObjectId
from pymongo import ASCENDING, MongoClient
from pymongo.errors import BulkWriteError, PyMongoError

from database import connect, embedded
from database.events import EventStore

pytestmark = pytest.mark.integration


def _server(home: Path, batched: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    monkeypatch.setattr(embedded, "BATCHED_INSERTS", batched)
    return embedded.start_server(home)


def _event(i: int, session: str = "K", size: int = 200) -> dict:
    return {
        "event_id": f"{session}-{i}-{uuid.uuid4().hex[:6]}",
        "session_id": session,
        "cycle_id": f"{session}:c1",
        "ts": 1_700_000_000.0 + i,
        "state": "ANALYZING",
        "kind": "llm_request",
        "payload": {"i": i, "text": "x" * size, "nested": [{"a": [1, 2.5, None, True]}, {"b": {"c": "é"}}]},
    }


def _rows(data_dir: Path, db: str, table: str) -> list[tuple]:
    con = sqlite3.connect(data_dir / f"{db}.db")
    try:
        return con.execute(f"SELECT _id, data FROM {table} ORDER BY id").fetchall()
    finally:
        con.close()


def test_patched_server_stores_what_plain_nx_27017_stores(tmp_path: Path, monkeypatch) -> None:
    docs = [
        {
            "_id": ObjectId("65a000000000000000000001"),
            "s": "plain",
            "n": Int64(2**40),
            "f": 0.1,
            "none": None,
            "when": dt.datetime(2024, 1, 2, 3, 4, 5),
            "raw": b"\x00\x01bytes",
            "bin": Binary(b"\x02", 5),
            "deep": {"list": [{"oid": ObjectId("65a000000000000000000009")}, [b"in-list", 3]], "uni": "日本"},
        },
        {"_id": "string-id", "k": 1},
        {"_id": ObjectId("65a000000000000000000002"), "k": 2},
        {"_id": "string-id", "k": "a duplicate: an ordered insert stops here"},
        {"_id": ObjectId("65a000000000000000000003"), "k": 3},
    ]
    stored, errors = {}, {}
    for batched in (False, True):
        home = tmp_path / f"home-{batched}"
        port, _ = _server(home, batched, monkeypatch)
        client = MongoClient("127.0.0.1", port, directConnection=True)
        try:
            col = client.cmp.things
            col.create_index([("k", ASCENDING)], name="k")
            with pytest.raises(BulkWriteError) as info:
                col.insert_many([dict(d) for d in docs], ordered=True)
            errors[batched] = (info.value.details["nInserted"], [e["index"] for e in info.value.details["writeErrors"]])
            found = list(col.find({}, sort=[("_id", ASCENDING)]))
        finally:
            client.close()
            embedded.stop_server(home)
        stored[batched] = (_rows(home / "data", "cmp", "things"), found)
    assert errors[True] == errors[False] == (3, [3])
    assert stored[True][0] == stored[False][0], "the stored JSON differs from plain nx-27017's"
    assert stored[True][1] == stored[False][1]
    assert len(stored[True][0]) == 3


def test_server_killed_while_a_writer_appends_leaves_a_chain_intact_prefix(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    port, pid = _server(home, True, monkeypatch)
    store = connect(f"mongodb://127.0.0.1:{port}/killed", timeout_s=1.0)
    acked: list[str] = []
    stop = threading.Event()

    def append_forever() -> None:
        i = 0
        while not stop.is_set():
            batch = [_event(i + k, "S", size=2000) for k in range(50)]
            i += 50
            try:
                store.events.append(batch)
            except PyMongoError:
                return
            acked.extend(e["event_id"] for e in batch)

    t = threading.Thread(target=append_forever)
    t.start()
    deadline = time.monotonic() + 10
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)  # mid-batch, most likely: batches follow each other back to back
    stop.set()
    t.join(timeout=30)
    store.close()
    embedded.stop_server(home)  # reaps the killed child
    assert len(acked) >= 300

    port, _ = embedded.start_server(home)  # the same files, after the crash
    try:
        after = connect(f"mongodb://127.0.0.1:{port}/killed")
        events = after.events.read("S")
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), "a gap after the crash"
        assert after.events.verify_chain("S")["ok"]
        kept = {e["event_id"] for e in events}
        assert set(acked) <= kept, "an acknowledged event was lost"
        # whole batches only: each insert command was one transaction
        assert len(events) % 50 == 0
        after.close()
    finally:
        embedded.stop_server(home)


def _fsyncs(path: Path) -> int:
    text = path.read_text() if path.exists() else ""
    return sum(1 for line in text.splitlines() if "fsync(" in line or "fdatasync(" in line)


def test_inserts_are_not_fsynced_per_document_but_the_barrier_is(tmp_path: Path, monkeypatch) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace not installed")
    home = tmp_path / "home"
    port, pid = _server(home, True, monkeypatch)
    store = connect(f"mongodb://127.0.0.1:{port}/fsyncs")
    out = tmp_path / "strace.out"
    tracer = None
    try:
        events: EventStore = store.events
        events.append([_event(i, "F") for i in range(5)])
        events.sync()  # a `j` write first: on plain nx-27017 every later insert would then be fsynced
        tracer = subprocess.Popen(
            ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-p", str(pid), "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)
        if tracer.poll() is not None:
            pytest.skip(f"strace cannot attach here: {tracer.stderr.read().decode(errors='replace')[:200]}")
        for n in range(5):
            events.append([_event(100 + 20 * n + i, "F") for i in range(20)])
        time.sleep(0.3)
        during_appends = _fsyncs(out)
        events.sync()
        time.sleep(0.3)
        at_barrier = _fsyncs(out) - during_appends
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.terminate()
            tracer.wait(timeout=10)
        store.close()
        embedded.stop_server(home)
    # 100 documents in 5 commands: not one fsync each (a WAL checkpoint may add one)
    assert during_appends <= 1, f"{during_appends} fsyncs while appending 100 events"
    assert at_barrier >= 1, "the durability barrier did not fsync"


def test_a_session_read_from_the_sqlite_file_is_the_servers_answer(tg_home: Path) -> None:
    from graph.machine.runner import run_state_machine
    from graph.services.replay.session import load_session_log

    store = connect()  # the embedded path: it knows the server's file
    try:
        events: EventStore = store.events
        assert events.local_file == tg_home.resolve() / "data" / "tradegraph.db"
        out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store)
        session = out.session_id
        local = events._read_local(session)
        assert local is not None and len(local) == out.events > 50, "the file path was not taken"
        via_server = _read_through_server(events, session)
        assert local == via_server and [type(v) for d in local for v in d.values()] == [
            type(v) for d in via_server for v in d.values()
        ]
        assert events.verify_chain(session)["ok"]
        assert load_session_log(store, session).events == out.events

        # a gap: both paths skip it the same way
        events.insert_raw({**_event(0, session), "seq": out.events + 3, "prev_hash": None, "hash": None})
        assert events._read_local(session) == _read_through_server(events, session)
        assert [e["seq"] for e in events.read(session)][-2:] == [out.events, out.events + 3]

        # what nx-27017's decoder would turn into a datetime: read through the server, never differently
        events.append([{**_event(1, "D"), "payload": {"when": {"$date": "2024-01-02T03:04:05Z"}}}])
        assert events._read_local("D") is None
        assert events.read("D") == _read_through_server(events, "D")
        # a missing session reads as empty on both paths
        assert events._read_local("nobody") == [] and events.read("nobody") == []
    finally:
        store.close()


def test_an_id_holding_false_or_a_zero_float_reads_the_same_both_ways_and_verifies(tg_home: Path) -> None:
    """nx-27017's reply converter made any `id: false`, `id: 0.0` or `id: -0.0` an Int64(0): a read through the
    server then hashed `0` where `false` was stored, and the chain verified on the file read only."""
    store = connect()
    try:
        events: EventStore = store.events
        payload = {"id": False, "order": {"id": 0.0, "qty": 1}, "fills": [{"id": -0.0}], "cursor": {"id": 0}}
        events.append([{**_event(1, "Z"), "payload": payload}])
        local = events._read_local("Z")
        served = _read_through_server(events, "Z")
        assert local is not None and local[0]["payload"] == payload
        assert repr(served[0]["payload"]) == repr(payload)  # False, 0.0 and -0.0 as stored, not Int64(0)
        assert events.read("Z", kind="llm_request")[0]["payload"]["id"] is False
        assert events.verify_chain("Z")["ok"]
        local_file, events.local_file = events.local_file, None
        try:
            assert events.verify_chain("Z")["ok"]  # through the server too
        finally:
            events.local_file = local_file
    finally:
        store.close()


def _read_through_server(events: EventStore, session: str) -> list[dict]:
    local, events.local_file = events.local_file, None
    try:
        return events.read(session)
    finally:
        events.local_file = local


def test_the_faster_reply_converter_answers_as_nx_27017s_own() -> None:
    import decimal
    import random

    from neosqlite.objectid import ObjectId as NeoObjectId
    from nx_27017.utils import convert_neo_to_bson_objectids as original

    from database.nx_27017_server import _fast_reply_converter

    fast = _fast_reply_converter()
    rnd = random.Random(14)
    leaves = [
        0,
        0.0,
        False,
        True,
        None,
        1,
        -3,
        2.5,
        "s",
        "id",
        b"raw",
        Binary(b"x", 5),
        NeoObjectId(),
        decimal.Decimal("1.10"),
        dt.datetime(2020, 1, 1),
        Int64(7),
    ]

    def value(depth: int = 0):
        r = rnd.random()
        if depth > 4 or r < 0.5:
            return rnd.choice(leaves)
        if r < 0.75:
            return [value(depth + 1) for _ in range(rnd.randint(0, 4))]
        return {
            rnd.choice(["id", "a", "_id", "b"]) + ("" if rnd.random() < 0.5 else str(i)): value(depth + 1)
            for i in range(rnd.randint(0, 5))
        }

    def zero_ids_kept(stored, converted):
        """The original's answer with what it changed on purpose put back: an `id` holding false, 0.0 or -0.0
        (the original makes each Int64(0), as it does a cursor's id 0)."""
        if isinstance(stored, dict):
            return {
                k: v if k == "id" and type(v) is not int and v == 0 else zero_ids_kept(v, converted[k])
                for k, v in stored.items()
            }
        if isinstance(stored, list):
            return [zero_ids_kept(v, c) for v, c in zip(stored, converted)]
        return converted

    kept = 0
    for _ in range(5000):
        doc = value()
        upstream = original(doc)
        want, got = zero_ids_kept(doc, upstream), fast(doc)
        kept += repr(want) != repr(upstream)  # repr: False == Int64(0) to `!=`
        # repr tells Int64(0) from 0 and a BSON ObjectId from NeoSQLite's
        assert repr(got) == repr(want) and type(got) is type(want)
    assert kept > 100  # the documents with such an id were many, and each kept it
    assert fast({"id": 0, "o": {"id": False}}) == {"id": Int64(0), "o": {"id": False}}
    assert type(fast({"id": 0})["id"]) is Int64 and type(fast({"id": 0.0})["id"]) is float
