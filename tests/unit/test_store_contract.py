"""One contract suite, run unchanged against every backend (mongomock and the embedded server)."""

from __future__ import annotations

import threading
import time
import uuid

import pydantic
import pytest

from database import BufferedEventWriter, DuplicateEventError, Store
from schemas.base import SCHEMA_VERSION
from schemas.portfolio import PortfolioSnapshot, Position


def make_event(session: str = "S1", *, cycle: str = "c1", kind: str = "transition", n: int = 0, **extra) -> dict:
    ev = {
        "event_id": extra.pop("event_id", f"ev-{uuid.uuid4().hex}"),
        "session_id": session,
        "cycle_id": cycle,
        "ts": 1_700_000_000.0 + n,
        "state": "SCANNING",
        "kind": kind,
        "payload": {"n": n, "nested": {"xs": [1, 2.5, None, True]}},
    }
    ev.update(extra)
    return ev


def seqs(store: Store, session: str) -> list[int]:
    return [e["seq"] for e in store.events.read(session)]


def test_append_assigns_seq_in_order(store: Store) -> None:
    evs = [make_event(n=i) for i in range(5)]
    stored = store.events.append(evs)
    assert [d["seq"] for d in stored] == [1, 2, 3, 4, 5]
    assert [d["event_id"] for d in stored] == [e["event_id"] for e in evs]
    assert store.events.append([make_event(n=9)])[0]["seq"] == 6
    read = store.events.read("S1")
    assert [e["payload"]["n"] for e in read] == [0, 1, 2, 3, 4, 9]
    assert all("_id" not in e for e in read)
    assert read[0]["schema_version"] == SCHEMA_VERSION  # defaulted when the caller omits it
    assert store.events.count("S1") == 6 and store.events.exists("S1") and not store.events.exists("nope")


def test_seqs_are_per_session(store: Store) -> None:
    stored = store.events.append([make_event("A"), make_event("B"), make_event("A"), make_event("B"), make_event("A")])
    assert [(d["session_id"], d["seq"]) for d in stored] == [("A", 1), ("B", 1), ("A", 2), ("B", 2), ("A", 3)]


def test_concurrent_appends_are_gap_free_and_unique(store: Store) -> None:
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            i = 0
            while i < 50:
                k = 1 + (i + w) % 3  # one to three events per call
                k = min(k, 50 - i)
                store.events.append([make_event("C", n=w * 100 + i + j) for j in range(k)])
                i += k
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seqs(store, "C") == list(range(1, 401))
    # each thread's own events keep their relative order
    for w in range(8):
        mine = [e["payload"]["n"] for e in store.events.read("C") if e["payload"]["n"] // 100 == w]
        assert mine == sorted(mine) and len(mine) == 50


def test_reappending_same_event_is_a_noop(store: Store) -> None:
    ev = make_event(n=1)
    assert store.events.append([ev])[0]["seq"] == 1
    assert store.events.append([ev]) == []
    # a retried batch: only the new event is stored, and it takes the next seq
    new = make_event(n=2)
    stored = store.events.append([ev, new])
    assert [(d["event_id"], d["seq"]) for d in stored] == [(new["event_id"], 2)]
    assert store.events.count("S1") == 2
    assert seqs(store, "S1") == [1, 2]


def test_same_event_id_different_content_is_an_error(store: Store) -> None:
    ev = make_event(n=1)
    store.events.append([ev])
    with pytest.raises(DuplicateEventError, match=ev["event_id"]):
        store.events.append([dict(ev, payload={"n": 999})])
    assert store.events.read("S1")[0]["payload"]["n"] == 1  # never overwritten
    with pytest.raises(DuplicateEventError):  # also within one batch
        store.events.append([make_event(event_id="x", n=1), make_event(event_id="x", n=2)])
    assert store.events.count("S1") == 1
    assert store.events.append([make_event(n=3)])[0]["seq"] == 2  # the rejected calls consumed no seq


def test_duplicate_seq_is_rejected(store: Store) -> None:
    store.events.append([make_event(n=1), make_event(n=2)])
    with pytest.raises(DuplicateEventError, match="seq 2"):
        store.events.insert_raw(dict(make_event(n=3), seq=2))
    assert [e["payload"]["n"] for e in store.events.read("S1")] == [1, 2]
    # a raw insert past the counter moves it, so the next append doesn't collide with it
    store.events.insert_raw(dict(make_event(n=10), seq=10))
    assert store.events.append([make_event(n=11)])[0]["seq"] == 11


def test_read_sorted_and_filtered(store: Store) -> None:
    store.events.append([make_event(kind="transition", n=0), make_event(kind="llm_request", n=1, cycle="c2")])
    store.events.append([make_event(kind="llm_response", n=2, cycle="c2"), make_event(kind="transition", n=3)])
    assert [e["seq"] for e in store.events.read("S1")] == [1, 2, 3, 4]
    assert [e["seq"] for e in store.events.read("S1", kind="transition")] == [1, 4]
    assert [e["kind"] for e in store.events.read("S1", cycle_id="c2")] == ["llm_request", "llm_response"]
    assert store.events.read("S1", kind="transition", cycle_id="c2") == []
    assert store.events.read("other") == []


def test_malformed_event_rejected_before_write(store: Store) -> None:
    good = make_event(n=1)
    with pytest.raises(pydantic.ValidationError):
        store.events.append([good, make_event(kind="bogus")])
    with pytest.raises(pydantic.ValidationError):
        store.events.append([dict(make_event(), unexpected_field=1)])
    with pytest.raises(ValueError, match="assigns seq"):
        store.events.append([dict(make_event(), seq=7)])
    assert store.events.count("S1") == 0  # the good event in the bad batch was not written either
    assert store.events.append([good])[0]["seq"] == 1


@pytest.mark.parametrize("field", ["session_id", "cycle_id", "event_id"])
def test_an_id_with_a_control_character_is_refused_before_write(store: Store, field: str) -> None:
    # the embedded store's SQLite reads a string up to a NUL: "S1\x00b" was session "S1" to its queries
    bad = dict(make_event(n=1), **{field: "S1\x00b"})
    with pytest.raises(pydantic.ValidationError, match=field):
        store.events.append([make_event(n=0), bad])
    with pytest.raises(pydantic.ValidationError, match=field):
        store.events.append([dict(make_event(n=2), **{field: "S1\tb"})])
    assert store.events.count("S1") == 0 and store.events.read("S1") == []
    assert store.events.append([make_event(n=3, session="S1 b\u2028é")])[0]["seq"] == 1  # other characters pass


def test_sessions_summary(store: Store) -> None:
    store.events.append([make_event("old", n=0, cycle="a"), make_event("old", n=1, cycle="b", kind="error")])
    store.events.append([make_event("new", n=5), make_event("new", n=6), make_event("new", n=7, kind="contract")])
    rows = store.events.sessions()
    assert [r["session_id"] for r in rows] == ["new", "old"]
    new, old = rows
    assert (new["events"], new["cycles"], new["last_kind"]) == (3, 1, "contract")
    assert (old["events"], old["cycles"], old["last_kind"]) == (2, 2, "error")
    assert (old["first_ts"], old["last_ts"]) == (1_700_000_000.0, 1_700_000_001.0)
    assert len(store.events.sessions(limit=1)) == 1


@pytest.mark.parametrize("background", [True, False])
def test_buffered_writer_many_threads(store: Store, background: bool) -> None:
    writer = BufferedEventWriter(store.events, flush_every=16, background=background)
    order_lock = threading.Lock()
    put_order: list[str] = []

    def worker(w: int) -> None:
        for i in range(50):
            ev = make_event("W", n=w * 100 + i)
            # the writer keeps put() order; record it under the same kind of lock to compare
            with order_lock:
                writer.put(ev)
                put_order.append(ev["event_id"])

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.flush()
    read = store.events.read("W")
    assert [e["seq"] for e in read] == list(range(1, 401))
    assert [e["event_id"] for e in read] == put_order
    writer.put(make_event("W", n=999))
    writer.close()
    assert store.events.count("W") == 401


@pytest.mark.parametrize("continuous", [True, False])
def test_a_continuous_writer_stores_while_the_cycle_runs(store: Store, continuous: bool) -> None:
    """Continuous: batches go out while events keep coming, so a flush (the barrier) waits only for the tail.
    The older rule (continuous=False) holds them until flush_every are queued, linger_s passes or a flush."""
    writer = BufferedEventWriter(
        store.events, flush_every=512, linger_s=60, continuous=continuous, gather_s=0.01, gather_max=8
    )
    for i in range(20):
        writer.put(make_event("C", n=i))
    deadline = time.monotonic() + (5 if continuous else 0.5)
    while store.events.count("C") < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    before_flush = store.events.count("C")
    writer.close()
    assert [e["seq"] for e in store.events.read("C")] == list(range(1, 21))
    assert before_flush == (20 if continuous else 0)


@pytest.mark.parametrize("background", [True, False])
def test_buffered_writer_surfaces_storage_error(store: Store, background: bool) -> None:
    ev = make_event(n=1)
    store.events.append([ev])
    writer = BufferedEventWriter(store.events, flush_every=4, background=background)
    writer.put(dict(ev, payload={"changed": True}))  # same event_id, different content
    with pytest.raises(DuplicateEventError):
        writer.flush()
    with pytest.raises(DuplicateEventError):  # sticky: put() refuses instead of queueing silently
        writer.put(make_event(n=2))
    with pytest.raises(DuplicateEventError):  # and the writer fails closed, never silently
        writer.close()
    assert store.events.count("S1") == 1


def test_ledger_records_once(store: Store) -> None:
    first = {"cycle_id": "c1", "status": "filled", "qty": 10.0}
    assert store.executions.get("c1") is None
    assert store.executions.record("c1", "S1", first) is True
    assert store.executions.record("c1", "S1", {"cycle_id": "c1", "status": "filled", "qty": 20.0}) is False
    assert store.executions.get("c1") == first
    assert store.executions.record("c2", "S1", {"x": 1}) is True


def test_portfolio_roundtrip(store: Store) -> None:
    assert store.portfolios.load("S1") is None
    snap = PortfolioSnapshot(
        cash=1234.5,
        positions={"AAPL": Position(symbol="AAPL", quantity=3, avg_price=101.25, opened="2024-01-02")},
        as_of="2024-01-03",
        realized_pnl_today=-4.0,
    )
    store.portfolios.save("S1", snap, "c1")
    assert store.portfolios.load("S1") == snap
    later = snap.model_copy(update={"cash": 10.0, "positions": {}})
    store.portfolios.save("S1", later, "c2")
    assert store.portfolios.load("S1") == later
    assert store.db["portfolios"].count_documents({"session_id": "S1"}) == 1
    assert store.db["portfolios"].find_one({"session_id": "S1"})["cycle_id"] == "c2"


def test_same_mongomock_uri_shares_data() -> None:
    from database import connect

    uri = f"mongomock://shared_{uuid.uuid4().hex[:8]}"
    a, b = connect(uri), connect(uri)
    a.events.append([make_event("X")])
    assert b.events.count("X") == 1
    a.close()
    b.close()


def test_event_id_reused_across_sessions_is_rejected_without_a_gap(store: Store) -> None:
    ev = make_event("A", n=1)
    store.events.append([ev])
    first = make_event("B", n=1)
    with pytest.raises(DuplicateEventError):
        store.events.append([first, dict(ev, session_id="B")])
    assert store.events.read("A")[0]["session_id"] == "A"  # not overwritten
    # the ordered insert wrote `first`; the seq the rejected event took was given back
    assert seqs(store, "B") == [1]
    assert store.events.append([make_event("B", n=2)])[0]["seq"] == 2


def test_hash_chain_verifies_and_names_the_first_broken_link(store: Store) -> None:
    store.events.append([make_event("H", n=i) for i in range(3)])
    store.events.append([make_event("H", n=3, payload={"x": 1.0, "y": [2.5, None], "z": "é"})])
    report = store.events.verify_chain("H")
    assert (report["ok"], report["checked"], report["first_broken"]) == (True, 4, None)
    # the hash survives the store's own round trip (floats, unicode): recomputed from what was read back
    read = store.events.read("H")
    assert read[0]["prev_hash"] == "0" * 64 and all(b["prev_hash"] == a["hash"] for a, b in zip(read, read[1:]))
    # edit one stored payload behind the store's back
    store.db["state_events"].update_one({"session_id": "H", "seq": 3}, {"$set": {"payload.n": 99}})
    report = store.events.verify_chain("H")
    assert not report["ok"] and report["first_broken"]["seq"] == 3 and "edited" in report["first_broken"]["reason"]


def test_hash_chain_detects_a_removed_event(store: Store) -> None:
    store.events.append([make_event("R", n=i) for i in range(4)])
    store.db["state_events"].delete_one({"session_id": "R", "seq": 2})
    report = store.events.verify_chain("R")
    assert not report["ok"] and report["first_broken"]["seq"] == 2 and "missing" in report["first_broken"]["reason"]


def test_appends_from_two_stores_race_without_gaps_and_keep_the_chain(store: Store) -> None:
    """Two EventStore objects (two processes' worth of head caches) on one session."""
    from database.events import EventStore

    other = EventStore(store.db, serialize=store.events._serialize)
    for i in range(10):
        (store.events if i % 2 else other).append([make_event("T", n=i), make_event("T", n=100 + i)])
    assert seqs(store, "T") == list(range(1, 21)) and store.events.count("T") == 20
    assert store.events.verify_chain("T")["ok"]


# ---------------------------------------------------------------------------- chain heads (database/heads.py)
def three_cycles(store: Store, session: str = "S", per_batch: int = 5, batches: int = 2) -> list[list[dict]]:
    """Cycles 1..3 allocated as the runner does (next_cycle), each written in a few batches; returns the
    stored events of each cycle."""
    cycles = []
    for c in range(1, 4):
        assert store.events.next_cycle(session) == c
        stored = []
        for b in range(batches):
            stored += store.events.append(
                [make_event(session, cycle=f"{session}:c{c}", n=c * 100 + b * 10 + i) for i in range(per_batch)]
            )
        cycles.append(stored)
    return cycles


def broken(store: Store, session: str) -> tuple[int, str]:
    report = store.events.verify_chain(session)
    assert not report["ok"], report
    return report["first_broken"]["seq"], report["first_broken"]["reason"]


def test_the_head_follows_every_batch(store: Store) -> None:
    cycles = three_cycles(store)
    last = cycles[-1][-1]
    head = store.events.heads.get("S")
    assert (head.seq, head.hash, head.sig) == (30, last["hash"], None)
    report = store.events.verify_chain("S")
    assert report["ok"] and report["head"]["seq"] == 30 and report["after_head"] == 0
    assert report["head_note"] == "the log ends at its chain head, seq 30 (unsigned)"


def test_a_removed_last_event_is_a_missing_tail(store: Store) -> None:
    three_cycles(store)
    store.db["state_events"].delete_one({"session_id": "S", "seq": 30})
    assert broken(store, "S") == (
        30,
        "the log ends at seq 29, but its chain head records seq 30: seq 30 missing (the log was cut short)",
    )


def test_a_removed_last_cycle_is_named_by_its_first_seq(store: Store) -> None:
    cycles = three_cycles(store)
    store.db["state_events"].delete_many({"session_id": "S", "cycle_id": "S:c3"})
    seq, reason = broken(store, "S")
    assert seq == cycles[2][0]["seq"] == 21 and "seq 21..30 missing" in reason


def test_a_rolled_back_head_is_betrayed_by_the_cycle_counter(store: Store) -> None:
    """The tail deleted and the head moved back onto the shorter log, consistently: the counter still says three
    cycles were allocated, and the log holds none of the third."""
    cycles = three_cycles(store)
    store.db["state_events"].delete_many({"session_id": "S", "cycle_id": "S:c3"})
    end = cycles[1][-1]
    store.db["chain_heads"].update_one({"_id": "S"}, {"$set": {"seq": end["seq"], "hash": end["hash"]}})
    seq, reason = broken(store, "S")
    assert seq == 21 and "cycle S:c3 was allocated (the cycle counter is at 3)" in reason
    # and by the execution ledger when that cycle filled, whatever the counter says
    store.db["counters"].update_one({"_id": "S#cycles"}, {"$set": {"n": 2}})
    assert store.events.verify_chain("S")["ok"]  # log, head and counter rewritten consistently: not detected
    store.executions.record("S:c3", "S", {"status": "filled"})
    seq, reason = broken(store, "S")
    assert seq == 21 and "S:c3 has an execution-ledger entry (committed)" in reason


def test_a_head_whose_event_was_replaced_is_named(store: Store) -> None:
    """The last event rewritten and the chain re-hashed to match (no key, the head untouched)."""
    from database.events import event_hash

    three_cycles(store)
    doc = store.db["state_events"].find_one({"session_id": "S", "seq": 30}, {"_id": 0})
    doc["payload"] = {"n": -1}
    doc["hash"] = event_hash(doc)
    store.db["state_events"].replace_one({"session_id": "S", "seq": 30}, doc)
    seq, reason = broken(store, "S")
    assert seq == 30 and "the event at seq 30 is not the one its chain head records" in reason


def test_the_head_never_moves_back(store: Store) -> None:
    """A redelivered (already stored) batch, a writer with a stale head cache, and a direct lower write."""
    from database.events import EventStore

    sent = [make_event("B", n=i) for i in range(3)]
    first = store.events.append(sent)
    stale = EventStore(store.db, serialize=store.events._serialize)
    stale._heads["B"] = (1, first[0]["hash"])  # believes the session ends at seq 1
    store.events.append([make_event("B", n=3 + i) for i in range(3)])
    assert store.events.heads.get("B").seq == 6
    assert store.events.append(sent) == []  # a redelivery (a spool, a retry): nothing new, the head stays
    assert store.events.heads.get("B").seq == 6
    stored = stale.append([make_event("B", n=10)])  # collides at seq 2, re-reads the log, lands at 7
    assert stored[0]["seq"] == 7 and store.events.heads.get("B").seq == 7
    store.events.heads.advance("B", 3, first[2]["hash"])
    assert store.events.heads.get("B").seq == 7 and store.events.verify_chain("B")["ok"]


def test_a_retried_batch_whose_reply_was_lost_still_moves_the_head(store: Store) -> None:
    """The batch landed but its writer never heard (a lost reply): the retry finds every event stored."""
    events = [make_event("L", n=i) for i in range(4)]
    store.events.append(events)
    store.db["chain_heads"].delete_one({"_id": "L"})  # as if the writer had not got to its head update
    assert store.events.append(events) == []
    assert store.events.heads.get("L").seq == 4


def test_a_log_past_its_head_is_reported_not_failed(store: Store) -> None:
    three_cycles(store)
    end = store.events.read("S")[24]
    # what a writer killed between its batch and its head update leaves (the real kill: tests/faults)
    store.db["chain_heads"].update_one({"_id": "S"}, {"$set": {"seq": end["seq"], "hash": end["hash"]}})
    report = store.events.verify_chain("S")
    assert report["ok"] and report["after_head"] == 5
    assert report["head_note"].startswith("5 event(s) after the chain head at seq 25 (seq 26..30)")


def test_a_session_without_a_head_is_reported_as_such(store: Store) -> None:
    three_cycles(store)
    store.db["chain_heads"].delete_one({"_id": "S"})
    report = store.events.verify_chain("S")
    assert report["ok"] and report["head"] is None and report["head_note"].startswith("no chain head recorded")


KEY = "k" * 32


def test_a_signed_head_detects_a_consistent_rewrite_of_log_and_head(store: Store, monkeypatch) -> None:
    from database.events import event_hash
    from database.heads import key_id

    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    three_cycles(store)
    head = store.events.heads.get("S")
    assert head.key_id == key_id(KEY.encode()) and head.sig and store.events.verify_chain("S")["ok"]
    assert f"signature verified, key {head.key_id}" in store.events.verify_chain("S")["head_note"]
    # the last cycle deleted and the head moved onto the shorter log without the key: its signature fails
    store.db["state_events"].delete_many({"session_id": "S", "seq": {"$gt": 25}})
    end = store.db["state_events"].find_one({"session_id": "S", "seq": 25})
    store.db["chain_heads"].update_one({"_id": "S"}, {"$set": {"seq": 25, "hash": end["hash"]}})
    store.db["counters"].update_one({"_id": "S#cycles"}, {"$set": {"n": 3}})
    seq, reason = broken(store, "S")
    assert seq == 25 and "signature does not verify" in reason
    # without the key the same rewrite is consistent, so it passes: what the README says a key is for
    monkeypatch.delenv("TRADEGRAPH_AUDIT_KEY")
    assert store.events.verify_chain("S")["ok"]
    # an event edited and the chain re-hashed after it, the head's hash set to match: the key catches it
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    docs = store.events.read("S")
    prev = docs[9]["hash"]
    for d in docs[10:]:
        d["prev_hash"] = prev
        if d["seq"] == 11:
            d["payload"] = {"n": "edited"}
        d["hash"] = prev = event_hash(d)
        store.db["state_events"].replace_one({"session_id": "S", "seq": d["seq"]}, d)
    store.db["chain_heads"].update_one({"_id": "S"}, {"$set": {"hash": prev}})
    assert broken(store, "S")[0] == 25
    monkeypatch.delenv("TRADEGRAPH_AUDIT_KEY")
    assert store.events.verify_chain("S")["ok"]


def test_a_head_checked_under_another_key_or_unsigned_is_named(store: Store, monkeypatch) -> None:
    from database.heads import key_id

    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    store.events.append([make_event("W", n=i) for i in range(3)])
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", "another key, 32 bytes long......")
    seq, reason = broken(store, "W")
    assert seq == 3 and reason == (
        f"the chain head is signed with key {key_id(KEY.encode())}, not with the "
        f"configured TRADEGRAPH_AUDIT_KEY ({key_id(b'another key, 32 bytes long......')})"
    )
    store.db["chain_heads"].update_one({"_id": "W"}, {"$unset": {"sig": ""}})
    assert "the chain head is not signed, but TRADEGRAPH_AUDIT_KEY is set" in broken(store, "W")[1]


# ---------------------------------------------------------------- issue 28: summaries, the admin log's head, fences
def test_reindex_lowers_a_summary_whose_log_lost_events(store: Store) -> None:
    import graph.machine.recording  # noqa: F401 - registers how a summary reads a cycle's status

    store.events.append([make_event("R", n=i) for i in range(77)])
    assert store.sessions.fold("R") is None and store.sessions.get("R")["events"] == 77
    store.events.col.delete_one({"session_id": "R", "seq": 77})  # the log loses its last event
    out = store.sessions.reindex()
    assert out["corrected"] == 1
    assert (store.sessions.get("R")["events"], store.sessions.get("R")["seq"]) == (76, 76)
    # and a summary edited up (more events than the log holds) comes down too
    store.sessions.col.update_one({"_id": "R"}, {"$set": {"events": 500, "seq": 500}})
    store.sessions.reindex()
    assert store.sessions.get("R")["events"] == 76


def _two_deletions(store: Store) -> None:
    from database.admin_log import AdminLog

    log = AdminLog(store.db)
    for sid in ("D1", "D2"):
        started = log.append({"action": "delete_session", "phase": "started", "session_id": sid, "by": "alice"})
        log.append({"action": "delete_session", "phase": "done", "session_id": sid, "started_seq": started["seq"]})


def test_the_admin_logs_head_betrays_its_last_records_removed(store: Store) -> None:
    from database.admin_log import AdminLog

    _two_deletions(store)
    log = AdminLog(store.db)
    assert log.verify()["ok"] and log.head().seq == 4
    assert "deleted" in log.unknown_session("D2") and "by alice" in log.unknown_session("D2")
    log.col.delete_many({"seq": {"$gte": 3}})  # D2's deletion hidden: its two records removed from the end
    report = log.verify()
    assert not report["ok"] and report["first_broken"]["seq"] == 3
    assert "records 3..4 missing" in report["first_broken"]["reason"]
    # the deleted session's lookup no longer finds its record, and says the admin log is broken instead
    assert "admin log is broken at record 3" in log.unknown_session("D2")
    log.heads.col.delete_many({})  # and the head removed too: a log with records and no head is not vouched for
    assert not log.verify()["ok"] and "no head" in log.verify()["first_broken"]["reason"]


def test_a_signed_admin_head_cannot_be_rolled_back_without_the_key(store: Store, monkeypatch) -> None:
    from database.admin_log import HEAD_ID, AdminLog
    from database.heads import Head

    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", "admin log key, 32 bytes long....")
    _two_deletions(store)
    log = AdminLog(store.db)
    assert log.verify()["ok"] and log.head().sig
    log.col.delete_many({"seq": {"$gte": 3}})
    second = log.col.find_one({"seq": 2})
    # the head rolled back to record 2 by someone without the key: unsigned, or signed with another key
    log.heads.col.replace_one(
        {"_id": HEAD_ID}, {**Head(HEAD_ID, 2, second["hash"], "2026-01-01T00:00:00.000+00:00").__dict__}
    )
    assert "not signed" in log.verify()["first_broken"]["reason"]
    log.heads.col.replace_one(
        {"_id": HEAD_ID},
        {
            **Head(HEAD_ID, 2, second["hash"], "2026-01-01T00:00:00.000+00:00")
            .signed(b"another key, 32 bytes long......")
            .__dict__
        },
    )
    assert "signed with key" in log.verify()["first_broken"]["reason"]


def keyed_cycles(store: Store, session: str = "K") -> None:
    """Three cycles as a keyed runner writes them: each opens with a manifest carrying the signing mark
    (graph/machine/manifest.py), which the hash chain then covers."""
    from database.heads import MARK, signing_mark

    for c in range(1, 4):
        assert store.events.next_cycle(session) == c
        store.events.append(
            [
                make_event(
                    session, cycle=f"{session}:c{c}", kind="manifest", n=c, payload={"config": {}, MARK: signing_mark()}
                )
            ]
        )
        store.events.append([make_event(session, cycle=f"{session}:c{c}", n=c * 100 + i) for i in range(9)])


def rehash_from(store: Store, session: str, seq: int, edit) -> str:
    """The stored event at seq edited by `edit`, it and every later event re-chained; returns the new end hash."""
    from database.events import event_hash

    docs = store.events.read(session)
    prev = docs[seq - 2]["hash"] if seq > 1 else "0" * 64
    for d in docs[seq - 1 :]:
        d["prev_hash"] = prev
        if d["seq"] == seq:
            edit(d)
        d["hash"] = prev = event_hash(d)
        store.db["state_events"].replace_one({"session_id": session, "seq": d["seq"]}, d)
    return prev


def test_a_session_written_under_a_key_never_verifies_without_its_signed_head(store: Store, monkeypatch) -> None:
    """Issue 28: rewrite an event, re-hash to the end, delete the head: with the key set, or without it (the log's
    manifests say its heads are signed), the chain is broken, never a note."""
    from database.heads import key_id

    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    keyed_cycles(store)
    assert store.events.verify_chain("K")["ok"]
    rehash_from(store, "K", 12, lambda d: d["payload"].update(n="edited"))
    store.db["chain_heads"].delete_one({"_id": "K"})
    seq, reason = broken(store, "K")
    assert seq == 1 and reason == (
        f"the session was written under TRADEGRAPH_AUDIT_KEY (its manifest at seq 21 says "
        f"its chain heads are signed with key {key_id(KEY.encode())}), but it has no chain "
        f"head: the head was deleted, so nothing vouches for the log's content or length"
    )
    monkeypatch.delenv("TRADEGRAPH_AUDIT_KEY")
    assert broken(store, "K") == (seq, reason)
    # an unsigned head put in its place, without the key: the manifests name the key the head should carry
    end = store.db["state_events"].find_one({"session_id": "K", "seq": 30})
    store.db["chain_heads"].insert_one(
        {
            "_id": "K",
            "session_id": "K",
            "seq": 30,
            "hash": end["hash"],
            "updated": "2026-01-01T00:00:00.000+00:00",
            "key_id": None,
            "sig": None,
        }
    )
    assert broken(store, "K")[1].startswith("the chain head is not signed, but the session's manifest at seq 21 says")


def test_a_whole_last_cycle_cut_with_counter_ledger_and_head_gone_is_caught_under_a_key(
    store: Store, monkeypatch
) -> None:
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    keyed_cycles(store)
    store.db["state_events"].delete_many({"session_id": "K", "cycle_id": "K:c3"})
    store.db["counters"].update_one({"_id": "K#cycles"}, {"$set": {"n": 2}})
    store.db["executions"].delete_many({"cycle_id": "K:c3"})
    store.db["chain_heads"].delete_one({"_id": "K"})
    assert broken(store, "K")[0] == 1 and "has no chain head: the head was deleted" in broken(store, "K")[1]
    monkeypatch.delenv("TRADEGRAPH_AUDIT_KEY")
    assert "has no chain head: the head was deleted" in broken(store, "K")[1]


def test_with_the_key_set_a_headless_log_rehashed_from_its_first_manifest_is_still_broken(
    store: Store, monkeypatch
) -> None:
    """The signing mark removed by re-hashing from seq 1 and the head deleted: nothing in the log says it was
    keyed any more, but with the key set nothing signed vouches for it: broken. Without the key, the documented
    limit: a note."""
    from database.heads import MARK

    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    keyed_cycles(store)
    for seq in (1, 11, 21):
        rehash_from(store, "K", seq, lambda d: d["payload"].pop(MARK))
    store.db["chain_heads"].delete_one({"_id": "K"})
    seq, reason = broken(store, "K")
    assert seq == 1 and reason.startswith("no chain head, but TRADEGRAPH_AUDIT_KEY is set (key id k-")
    monkeypatch.delenv("TRADEGRAPH_AUDIT_KEY")
    report = store.events.verify_chain("K")
    assert report["ok"] and report["head_note"].startswith("no chain head recorded")


def test_a_fenced_writer_removes_what_it_stored_after_the_fence_and_stops(store: Store) -> None:
    from database.running import FencedEvents, SessionDeleted

    lease = store.running.start("F", "F:c2")
    try:
        store.events.append([make_event("F", n=i) for i in range(3)])  # the session as it stood
        writer = BufferedEventWriter(store.events, background=False, flush_every=2)
        writer.events = FencedEvents(store.events, lease)  # type: ignore[assignment]
        writer.put(make_event("F", n=10))
        writer.flush()
        assert store.events.count("F") == 4 and store.events.heads.get("F").seq == 4
        # a deletion fences the lease and removes the session; the writer's next batch lands after it
        store.running.fence(["F"], {"by": "alice", "at": time.time(), "admin_seq": 1})
        store.events.col.delete_many({"session_id": "F"})
        store.events.heads.col.delete_many({"_id": "F"})
        writer.put(make_event("F", n=11))
        with pytest.raises(SessionDeleted, match="deleted by alice"):
            writer.flush()
        assert store.events.count("F") == 0 and store.events.heads.get("F") is None
        assert store.running.live("F") == []  # fenced: no longer in flight
    finally:
        lease.end()
    assert store.running.col.find_one({"_id": lease.token}) is None
