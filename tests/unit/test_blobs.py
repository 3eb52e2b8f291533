"""A smaller log with the same proof (database/blobs.py): a batch's large payloads go to one compressed,
content-addressed pack; every reader gets the full events back; the hash chain covers what the packs hold; a lost
write or a killed writer never leaves an event referencing nothing; events stored whole (before packs) read, replay
and verify as before."""

from __future__ import annotations

import copy
import json
import random
import re
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import orjson
import pytest
from pymongo.errors import PyMongoError

from database import DuplicateEventError, Store, blobs, connect
from database.blobs import packed
from graph.machine.runner import run_state_machine
from tests.helpers import services_with
from tests.killed_writers import writer_server

ROOT = Path(__file__).resolve().parents[2]
HASHED = ("seq", "prev_hash", "hash")


@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    """One real offline cycle's events (2 symbols) as a writer hands them to the store: no seq, no hashes."""
    store = connect(f"mongomock://rec_{uuid.uuid4().hex[:8]}")
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    return [{k: v for k, v in e.items() if k not in HASHED} for e in store.events.read(out.session_id)]


def copies(recorded: list[dict], session: str) -> list[dict]:
    """The recorded cycle again under another session, with fresh event ids."""
    out = copy.deepcopy(recorded)
    for e in out:
        e.update(event_id=uuid.uuid4().hex, session_id=session, cycle_id=f"{session}:c1")
    return out


def rows(store: Store, session: str) -> list[dict]:
    """The stored documents of a session as they are in the collection (not read through the store)."""
    return list(store.db["state_events"].find({"session_id": session}, {"_id": 0}).sort("seq", 1))


def first_seq_using(store: Store, session: str, pack_id: str) -> int:
    return next(
        r["seq"]
        for r in rows(store, session)
        if blobs.ref_of(r["payload"]) and r["payload"][blobs.REF].startswith(pack_id)
    )


# ---------------------------------------------------------------------------- round trip
def test_a_cycle_is_stored_small_and_read_back_identical(store: Store, recorded) -> None:
    events = copies(recorded, "RT")
    stored = store.events.append(events)
    read = store.events.read("RT")
    assert read == stored
    assert [{k: v for k, v in e.items() if k not in HASHED} for e in read] == events
    assert all(list(a["payload"]) == list(b["payload"]) for a, b in zip(read, events))  # key order too
    assert store.events.read("RT", kind="llm_request") == [e for e in read if e["kind"] == "llm_request"]
    assert store.events.read("RT", cycle_id="RT:c1") == read
    assert store.events.verify_chain("RT")["ok"]
    # stored small: every large payload references a pack, and rows plus compressed packs are a fraction of the
    # full documents (each stored whole, they were all of it)
    raw = rows(store, "RT")
    large = [e for e in events if len(orjson.dumps(e["payload"])) > 512]
    assert packed(raw) >= len(large) > len(events) // 4
    packs = list(store.db[blobs.COLLECTION].find())
    kept = sum(len(orjson.dumps(r)) for r in raw) + sum(len(bytes(p["z"])) for p in packs)
    whole = sum(len(orjson.dumps(e)) for e in read)
    assert kept < 0.6 * whole, (kept, whole)
    # an error's type, a transition's target stay in the stored event, so a query can still name them
    assert {r["payload"]["to"] for r in raw if r["kind"] == "transition"} >= {"PLANNING", "END"}


def test_the_sqlite_read_gives_what_the_server_gives(tg_home, recorded, monkeypatch) -> None:
    store = connect()  # the embedded store under TRADEGRAPH_HOME: whole sessions are read from its SQLite file
    try:
        assert store.events.local_file is not None
        store.events.append(copies(recorded, "L"))
        local = store.events.read("L")
        assert packed(rows(store, "L")) and store.events.verify_chain("L")["ok"]
        monkeypatch.setattr(blobs.BlobStore, "_read", lambda self, ids: pytest.fail("asked the server for packs"))
        assert store.events.read("L") == local  # the packs came from the file too
        monkeypatch.undo()
        store.events.local_file = None
        assert store.events.read("L") == local
    finally:
        store.close()


# ---------------------------------------------------------------------------- the chain covers the packs
def _appended_in_batches(store: Store, recorded, session: str) -> list[str]:
    """The cycle appended in three batches (three packs); returns the pack ids in order."""
    events = copies(recorded, session)
    third = len(events) // 3
    for chunk in (events[:third], events[third : 2 * third], events[2 * third :]):
        store.events.append(chunk)
    ids = []
    for r in rows(store, session):
        ref = blobs.ref_of(r["payload"])
        if ref and ref.split(":")[0] not in ids:
            ids.append(ref.split(":")[0])
    assert len(ids) == 3
    return ids


def test_an_edited_swapped_or_deleted_pack_breaks_the_chain_at_the_first_event_using_it(store: Store, recorded) -> None:
    pack_id = _appended_in_batches(store, recorded, "P")[1]
    seq = first_seq_using(store, "P", pack_id)
    col = store.db[blobs.COLLECTION]
    original = col.find_one({"_id": pack_id})
    lines = blobs._zstd()[1].decompress(bytes(original["z"])).split(b"\n")

    def broken_with(z=None, delete=False) -> dict:
        col.delete_one({"_id": pack_id})  # (nx-27017 can insert a binary, not $set or replace one)
        if not delete:
            col.insert_one({**original, "z": z})
        report = store.events.verify_chain("P")
        col.delete_one({"_id": pack_id})
        col.insert_one(original)
        assert store.events.verify_chain("P")["ok"]
        assert not report["ok"]
        return report["first_broken"]

    # one figure changed in every entry, the pack recompressed: valid bytes, other content
    edited = [line.replace(b'"attempt":1', b'"attempt":2').replace(b'"model":"', b'"model":"x') for line in lines]
    assert edited != lines
    found = broken_with(blobs._zstd()[0].compress(b"\n".join(edited)))
    assert found["seq"] == seq and "pack holding its payload" in found["reason"]
    # another pack's bytes in its place (swapped)
    other = col.find_one({"_id": {"$ne": pack_id}})
    found = broken_with(other["z"])
    assert found["seq"] == seq
    found = broken_with(b"not zstd at all")
    assert found["seq"] == seq and "cannot be decompressed" in found["reason"]
    found = broken_with(delete=True)
    assert found["seq"] == seq and f"pack {pack_id[:12]}… is missing" in found["reason"]


def test_a_reference_edited_to_a_non_ascii_digit_is_a_broken_event_not_a_crash(store: Store, recorded) -> None:
    pack_id = _appended_in_batches(store, recorded, "N")[0]
    seq = first_seq_using(store, "N", pack_id)
    store.db["state_events"].update_one(
        {"session_id": "N", "seq": seq}, {"$set": {f"payload.{blobs.REF}": f"{pack_id}:²"}}
    )
    report = store.events.verify_chain("N")  # int("²") raised out of here, and out of every read of the session
    assert not report["ok"] and report["first_broken"]["seq"] == seq
    assert len(store.events.read("N")) == len(recorded)


def test_check_chain_names_the_seq_of_a_tampered_pack(capsys, monkeypatch) -> None:
    from graph.transports.cli.main import main as cli_main

    uri = f"mongomock://packs_cli_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MONGODB_URI", uri)
    store = connect(uri)
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    assert cli_main(["replay", out.session_id, "--check-chain"]) == 0
    capsys.readouterr()
    first = next(r for r in rows(store, out.session_id) if blobs.ref_of(r["payload"]))
    pack_id = first["payload"][blobs.REF].split(":")[0]
    col = store.db[blobs.COLLECTION]
    lines = blobs._zstd()[1].decompress(bytes(col.find_one({"_id": pack_id})["z"])).split(b"\n")
    col.update_one({"_id": pack_id}, {"$set": {"z": blobs._zstd()[0].compress(b"\n".join(lines[1:] + lines[:1]))}})
    assert cli_main(["replay", out.session_id, "--check-chain"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"broken at seq {first['seq']}" in err[0]


def test_a_deleted_pack_is_named_by_every_reader_that_lists_events_not_passed_off_as_the_log(
    store: Store, recorded
) -> None:
    pack_id = _appended_in_batches(store, recorded, "D")[0]
    events, unread = store.events.read_noting_unreadable("D")
    assert len(events) == len(recorded) and unread == {}
    store.db[blobs.COLLECTION].delete_one({"_id": pack_id})
    using = {r["seq"] for r in rows(store, "D") if (blobs.ref_of(r["payload"]) or "").startswith(pack_id)}
    events, unread = store.events.read_noting_unreadable("D")
    assert len(events) == len(recorded) and set(unread) == using != set()
    assert all(f"pack {pack_id[:12]}… is missing" in why for why in unread.values())


def test_events_and_portfolio_say_a_payload_cannot_be_read(capsys, monkeypatch) -> None:
    """`tradegraph events` lists such an event as stored (a reference where the payload was) and exits 1 naming
    it, over HTTP and MCP its page says so; a reader that needs the payload names the missing pack, not a field."""
    from graph.transports.cli.main import main as cli_main

    uri = f"mongomock://packs_gone_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MONGODB_URI", uri)
    store = connect(uri)
    sid = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with()).session_id
    assert cli_main(["events", sid]) == 0
    listed = capsys.readouterr()
    assert listed.err == "" and f'"{blobs.REF}"' not in listed.out
    first = next(r for r in rows(store, sid) if blobs.ref_of(r["payload"]))
    pack_id = first["payload"][blobs.REF].split(":")[0]
    using = {r["seq"] for r in rows(store, sid) if (blobs.ref_of(r["payload"]) or "").startswith(pack_id)}
    store.db[blobs.COLLECTION].delete_one({"_id": pack_id})
    assert cli_main(["events", sid]) == 1
    listed = capsys.readouterr()
    assert len(listed.out.splitlines()) == store.events.count(sid)  # every event still listed
    err = listed.err.strip().splitlines()
    assert len(err) == 1 and f"first: seq {first['seq']}: pack" in err[0] and "is missing" in err[0], err
    assert cli_main(["portfolio", sid]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    named = re.search(r"event seq (\d+) of session", err[0]) if len(err) == 1 else None
    assert named and int(named[1]) in using and "payload cannot be read" in err[0] and pack_id in err[0], err


# ---------------------------------------------------------------------------- idempotence, reserved key
def test_redelivered_events_in_other_batches_are_no_ops_and_changed_ones_are_refused(store: Store, recorded) -> None:
    events = copies(recorded, "I")
    first = store.events.append(events[:40])
    # a redelivery (a spool, a retry) grouped otherwise: the stored events are no-ops, the new ones go on
    later = store.events.append(events[20:60])
    assert [e["event_id"] for e in later] == [e["event_id"] for e in events[40:60]]
    assert [e["seq"] for e in later] == list(range(41, 61))
    assert store.events.append(events[:60]) == []
    big = next(i for i, e in enumerate(events[:40]) if packed([rows(store, "I")[i]]))
    changed = copy.deepcopy(events[big])
    key = next(k for k, v in changed["payload"].items() if not isinstance(v, str))
    changed["payload"][key] = "something else"
    with pytest.raises(DuplicateEventError, match="different content"):
        store.events.append([changed])
    assert store.events.read("I")[:40] == first and store.events.verify_chain("I")["ok"]


def test_a_redelivery_over_an_event_whose_pack_is_gone_says_so_not_different_content(store: Store, recorded) -> None:
    events = copies(recorded, "G")
    store.events.append(events[:40])
    (pack_id,) = {blobs.ref_of(r["payload"]).split(":")[0] for r in rows(store, "G") if blobs.ref_of(r["payload"])}
    store.db[blobs.COLLECTION].delete_one({"_id": pack_id})
    # grouped otherwise (another pack): the stored copies must be read to be compared, and cannot be
    with pytest.raises(DuplicateEventError, match=f"cannot be read \\(pack {pack_id[:12]}… is missing") as refused:
        store.events.append(events[20:60])
    assert "different content" not in str(refused.value)


def test_a_payload_using_the_reserved_key_is_refused_before_anything_is_written(store: Store, recorded) -> None:
    events = copies(recorded, "K")[:5]
    events[-1] = {**events[-1], "payload": {blobs.REF: "0" * 64 + ":0", "pad": "x" * 400}}
    with pytest.raises(ValueError, match="reserved"):
        store.events.append(events)
    assert store.events.count("K") == 0 and store.db[blobs.COLLECTION].count_documents({}) == 0


def test_releasing_a_deleted_session_deletes_the_packs_only_it_used(store: Store, recorded) -> None:
    events = copies(recorded, "A")
    shared = [{**e, "event_id": uuid.uuid4().hex, "session_id": "B", "cycle_id": "B:c1"} for e in events[:30]]
    store.events.append(events[:30])  # the same payloads in the same batch: one pack, used by A and B
    store.events.append(shared)
    store.events.append(events[30:])  # a pack only A uses
    col = store.db[blobs.COLLECTION]
    assert col.count_documents({}) == 2 and col.count_documents({"sessions": ["A", "B"]}) == 1
    store.events.col.delete_many({"session_id": "A"})
    assert store.events.release_packs("A") == 1
    assert col.count_documents({}) == 1 and store.events.verify_chain("B")["ok"]
    assert [e["payload"] for e in store.events.read("B")] == [e["payload"] for e in shared]
    store.events.col.delete_many({"session_id": "B"})
    assert store.events.release_packs("B") == 1 and col.count_documents({}) == 0


# ---------------------------------------------------------------------------- events stored whole (older sessions)
def test_events_stored_whole_read_verify_and_continue_beside_packed_ones(store: Store, recorded, monkeypatch) -> None:
    events = copies(recorded, "O")
    monkeypatch.setattr(blobs, "INLINE_MAX", 10**9)  # the format before packs: every payload whole in its event
    store.events.append(events[:50])
    assert packed(rows(store, "O")) == 0 and store.db[blobs.COLLECTION].count_documents({}) == 0
    monkeypatch.undo()
    store.events.append(events[50:])  # the same session goes on with packs
    assert packed(rows(store, "O")[:50]) == 0 < packed(rows(store, "O")[50:])
    read = store.events.read("O")
    assert [{k: v for k, v in e.items() if k not in HASHED} for e in read] == events
    assert store.events.verify_chain("O")["ok"]


def test_a_session_recorded_whole_replays_identical_and_its_replay_is_packed(monkeypatch) -> None:
    from graph.services.replay.session import verify_session

    store = connect(f"mongomock://whole_{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(blobs, "INLINE_MAX", 10**9)
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    monkeypatch.undo()
    assert packed(rows(store, out.session_id)) == 0
    report = verify_session(store, out.session_id)
    assert report.ok and report.chain["ok"], report
    replay = report.replay_session_id
    assert packed(rows(store, replay)) > 0 and store.events.verify_chain(replay)["ok"]


# ---------------------------------------------------------------------------- a pack is written before its events
# the BSON of an OP_MSG `{insert: <collection>}`: what the proxy swallows to lose that insert
BLOBS_INSERT = b"\x02insert\x00\x0c\x00\x00\x00state_blobs\x00"
EVENTS_INSERT = b"\x02insert\x00\x0d\x00\x00\x00state_events\x00"


@pytest.mark.integration
def test_a_lost_write_never_leaves_an_event_referencing_nothing(embedded_uri, recorded) -> None:
    from tests.fakes.tcp_proxy import FaultyProxy

    name = f"packs_{uuid.uuid4().hex[:10]}"
    proxy = FaultyProxy(int(embedded_uri.rsplit(":", 1)[1]))
    through = connect(f"mongodb://127.0.0.1:{proxy.port}/{name}", timeout_s=1.0)
    direct = connect(f"{embedded_uri}/{name}")
    events = copies(recorded, "X")
    try:
        proxy.drop_matching(BLOBS_INSERT)  # the pack's insert lost on the wire, its connection reset
        with pytest.raises(PyMongoError):
            through.events.append(events)
        assert proxy.dropped == 1
        assert direct.events.count("X") == 0 and direct.db[blobs.COLLECTION].count_documents({}) == 0
        proxy.drop_matching(EVENTS_INSERT)  # the pack landed, the events' insert is lost
        with pytest.raises(PyMongoError):
            through.events.append(events)
        assert proxy.dropped == 2
        assert direct.events.count("X") == 0 and direct.db[blobs.COLLECTION].count_documents({}) == 1
        stored = through.events.append(events)  # the retry: the same pack (already there), then the events
        assert len(stored) == len(events) and direct.db[blobs.COLLECTION].count_documents({}) == 1
        read = direct.events.read("X")
        assert [{k: v for k, v in e.items() if k not in HASHED} for e in read] == events
        assert direct.events.verify_chain("X")["ok"]
    finally:
        proxy.close()
        through.close()
        direct.client.drop_database(name)
        direct.close()


KILL_SCRIPT = """
import json, sys, uuid
from database import connect
store = connect(sys.argv[1])
template = json.load(open(sys.argv[2]))
print("ready", flush=True)
n = 0
while True:
    batch = []
    for e in template[n % len(template): n % len(template) + 1 + n % 17]:
        batch.append({**e, "event_id": uuid.uuid4().hex, "session_id": "K", "cycle_id": "K:c1"})
    store.events.append(batch)
    print(" ".join(e["event_id"] for e in batch), flush=True)  # acknowledged: these must never be lost
    n += 1
"""


@pytest.mark.integration
def test_writers_killed_mid_append_leave_every_stored_event_readable(embedded_uri, recorded, tmp_path) -> None:
    name = f"packs_kill_{uuid.uuid4().hex[:10]}"
    uri = f"{embedded_uri}/{name}"
    template = tmp_path / "events.json"
    template.write_text(json.dumps(recorded))
    rng = random.Random(11)
    acked: set[str] = set()
    kills = 8
    # each writer a process of its own, SIGKILLed; forked from one server that imported the store and the event
    # models (what a first append loads) once, so each writer is appending within the kill window
    with writer_server(
        KILL_SCRIPT,
        [uri, str(template)],
        tmp_path / "writers",
        preload="from database import connect; import schemas.events",
    ) as writers:
        for _ in range(kills):
            writer = writers.start()
            time.sleep(rng.uniform(0.05, 0.4))
            acked.update(i for line in writer.kill() for i in line.split())
    store = connect(uri)
    try:
        docs, found = store.events._read("K")
        assert len(acked) > kills and acked <= {d["event_id"] for d in docs}
        assert found and all(reason is None for reason in found.values())  # every pack referenced is there
        chain = store.events.verify_chain("K")
        assert chain["ok"] and chain["checked"] == len(docs), chain
    finally:
        store.client.drop_database(name)
        store.close()


# ---------------------------------------------------------------------------- smaller on disk, a real backtest
def _disk_bytes(path) -> int:
    """Bytes of the audit log's tables and their indexes in the embedded store's SQLite file."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'state_%' OR name LIKE 'idx_state_%'"
        ).fetchone()[0]
    finally:
        con.close()


def test_a_backtest_takes_less_disk_than_its_events_as_json(tg_home) -> None:
    """Stored whole, the audit log took ~1.65x its events' compact JSON on the embedded store's disk (nx-27017's
    JSON with spaces, its ObjectId markers, page slack, six indexes); with packs ~0.8x."""
    from graph.machine.cycle_context import default_services
    from graph.services.backtest.loop import run_backtest, session_id_of
    from schemas.simulation import EpisodeConfig

    store = connect()
    try:
        before = _disk_bytes(store.events.local_file)
        cfg = EpisodeConfig(
            episode_id="size",
            tickers=["AAPL", "MSFT", "IBM", "GOOG"],
            initial_cash=100_000,
            start="2011-01-03",
            end="2011-01-31",
            every=1,
        )
        res = run_backtest(
            cfg, store, progress=False, services=default_services(), out_dir=tempfile.mkdtemp(), max_steps=5
        )
        grown = _disk_bytes(store.events.local_file) - before
        events = store.events.read(session_id_of("size"))
        as_json = sum(len(orjson.dumps(e)) for e in events)
        assert res.decision_points == 5 and store.events.verify_chain(session_id_of("size"))["ok"]
        assert grown < 0.95 * as_json, (grown, as_json)
    finally:
        store.close()
