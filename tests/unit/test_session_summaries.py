"""Session summaries (database/sessions.py) say what the log says: after cycles (an approval resuming a paused one
included), a backtest, a replay, events another process appended, and after `store reindex`; replay sessions are
listed only when asked; a deleted session says so wherever it is looked up. On mongomock and the embedded server."""

from __future__ import annotations

import uuid

import orjson
import pytest

from database.sessions import SessionSummaries
from graph.machine.runner import approve_cycle, run_state_machine
from graph.services.replay.session import load_session_log, verify_session

FACTS = (
    "session_id",
    "kind",
    "seq",
    "events",
    "bytes",
    "cycles",
    "first_ts",
    "last_ts",
    "last_cycle_id",
    "last_kind",
    "last_state",
    "status",
    "symbols",
    "as_of",
    "replay_of",
)


def from_log(store, session_id: str) -> dict:
    """What the log says of a session, worked out here from the whole session as replay reads it."""
    events = store.events.read(session_id)
    session = load_session_log(store, session_id)
    last = next(c for c in session.cycles if c.cycle_id == events[-1]["cycle_id"])
    kind = {"s-": "run", "bt": "backtest", "re": "replay"}.get(session_id[:2], "other")
    return {
        "session_id": session_id,
        "kind": kind,
        "seq": events[-1]["seq"],
        "events": len(events),
        "bytes": sum(len(orjson.dumps(e)) for e in events),
        "cycles": len({e["cycle_id"] for e in events}),
        "first_ts": min(e["ts"] for e in events),
        "last_ts": max(e["ts"] for e in events),
        "last_cycle_id": last.cycle_id,
        "last_kind": events[-1]["kind"],
        "last_state": events[-1]["state"],
        "status": last.status,
        "symbols": (last.inputs or {}).get("symbols") or [],
        "as_of": (last.inputs or {}).get("as_of"),
        "replay_of": session.replay_of,
    }


def summary(store, session_id: str) -> dict:
    doc = store.sessions.get(session_id)
    assert doc is not None, f"no summary for {session_id}"
    return {k: doc.get(k) for k in FACTS}


def test_cycles_and_an_approval_are_summarised_as_the_log_says(store):
    first = run_state_machine(["AAPL"], "2012-03-01", store=store)
    sid = first.session_id
    assert summary(store, sid) == from_log(store, sid)
    paused = run_state_machine(["MSFT"], "2012-03-02", store=store, session_id=sid, approve=True)
    assert paused.status == "pending_approval"
    assert summary(store, sid) == from_log(store, sid) and summary(store, sid)["status"] == "pending_approval"
    # the approval resumes a cycle that began before the summary's seq: its status is read from the whole cycle
    done = approve_cycle(sid, store=store, approved=True, by="test")
    got = summary(store, sid)
    assert got == from_log(store, sid)
    assert (got["status"], got["cycles"], got["symbols"], got["as_of"]) == (done.status, 2, ["MSFT"], "2012-03-02")


def test_a_backtest_and_its_replay_are_summarised_and_the_replay_is_listed_only_when_asked(store, tmp_path):
    from graph.services.backtest.loop import run_backtest
    from schemas.simulation import EpisodeConfig

    cfg = EpisodeConfig(
        episode_id=f"sum{uuid.uuid4().hex[:6]}",
        tickers=["AAPL"],
        initial_cash=100_000,
        start="2011-03-01",
        end="2011-03-10",
        every=3,
    )
    res = run_backtest(cfg, store, progress=False, out_dir=tmp_path, max_steps=2)
    sid = f"bt-{cfg.episode_id}"
    got = summary(store, sid)
    assert got == from_log(store, sid) and got["kind"] == "backtest" and got["cycles"] == res.decision_points == 2

    report = verify_session(store, sid)
    rid = report.replay_session_id
    assert summary(store, rid) == from_log(store, rid)
    assert summary(store, rid)["replay_of"] == sid and summary(store, rid)["kind"] == "replay"
    assert [s["session_id"] for s in store.sessions.list(10).sessions] == [sid]
    assert [s["session_id"] for s in store.sessions.list(10, replays=True).sessions] == [rid, sid]


def test_events_another_process_appended_are_folded_in_and_reindex_rebuilds_what_was_left(store):
    sid = run_state_machine(["IBM"], "2012-03-01", store=store).session_id
    # another process's writer (its own Store, so nothing of it is seen here) appends and dies before folding
    other = type(store.events)(store.db, serialize=getattr(store.events, "_serialize", None))
    cycle = f"{sid}:c{other.next_cycle(sid)}"
    other.append(
        [
            {
                "event_id": uuid.uuid4().hex,
                "session_id": sid,
                "cycle_id": cycle,
                "ts": 2e9,
                "seq": None,
                "state": "RUNNER",
                "kind": "error",
                "payload": {"type": "X", "message": "killed"},
            }
            for _ in range(3)
        ]
    )
    listed = {s["session_id"]: s for s in store.sessions.list(10).sessions}
    assert store.sessions.list(10).behind == {sid: 3}, "the listing says the summary is behind its log"
    assert listed[sid]["events"] == from_log(store, sid)["events"] - 3
    # the session's next cycle here folds the events it did not write, read from the log
    run_state_machine(["IBM"], "2012-03-02", store=store, session_id=sid)
    assert summary(store, sid) == from_log(store, sid) and summary(store, sid)["cycles"] == 3
    assert store.sessions.list(10).behind == {}
    # a summary edited (or left behind by a crash) is put back by reindex; one of no session is removed
    store.sessions.col.update_one({"_id": sid}, {"$set": {"events": 1, "status": "nonsense"}})
    store.sessions.col.insert_one({"_id": "s-ghost", "session_id": "s-ghost", "kind": "run", "seq": 1, "last_ts": 1})
    out = SessionSummaries(store.db, store.events).reindex()
    assert (out["sessions"], out["corrected"], out["removed"]) == (1, 1, 1)
    assert summary(store, sid) == from_log(store, sid) and store.sessions.get("s-ghost") is None


def test_a_deleted_session_says_when_by_whom_and_what_its_head_was(store):
    from database.retention import ACTIVE_S, Retention, UnknownSession

    sid = run_state_machine(["AAPL"], "2012-03-01", store=store).session_id
    rid = verify_session(store, sid).replay_session_id
    head = store.events.heads.get(sid)
    r = Retention(store)
    plan = r.plan_delete(sid)
    assert [d.session_id for d in plan] == [sid, rid], "its replay goes with it"
    with pytest.raises(Exception, match="written to .* ago"):
        r.delete(plan, by="alice", reason="test")
    # past the quiet period of the later of the two heads: the replay's is written after the run's (by the verify's
    # length: over a second under a loaded suite, which made a `now` from the run's head alone refuse the replay)
    latest = max(head_time(store.events.heads.get(d.session_id)) for d in plan)
    deleted = r.delete(plan, by="alice", reason="test", now=latest + ACTIVE_S + 1)
    assert deleted[0].removed["state_events"] == head.seq and deleted[0].removed["chain_heads"] == 1
    for gone in (sid, rid):
        assert not store.events.exists(gone) and store.sessions.get(gone) is None
        assert store.events.heads.get(gone) is None
    assert store.portfolios.load(sid) is None
    with pytest.raises(UnknownSession, match=f"deleted .* by alice .*seq {head.seq}, hash {head.hash}"):
        r.plan_delete(sid)
    with pytest.raises(Exception, match=f"unknown session '{sid}': deleted .* by alice"):
        load_session_log(store, sid, check_chain=True)
    records = store.admin_log.records(sid)
    assert [x["phase"] for x in records] == ["started", "done"] and records[0]["head"]["hash"] == head.hash
    assert store.admin_log.verify()["ok"]
    # an edited record breaks the admin log's chain, and the deletion line says so
    store.admin_log.col.update_one({"seq": records[0]["seq"]}, {"$set": {"by": "mallory"}})
    assert store.admin_log.verify()["first_broken"]["seq"] == records[0]["seq"]
    assert "admin log is broken" in store.admin_log.deletion_line(sid)


def head_time(head) -> float:
    from datetime import datetime

    return datetime.fromisoformat(head.updated).timestamp()
