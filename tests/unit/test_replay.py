"""Reconstruction and verification of recorded sessions (mongomock; the real graph, offline model)."""

from __future__ import annotations

import json
import uuid

import pytest

from database.connection import connect
from graph.machine.runner import run_state_machine
from graph.services.replay.session import SessionNotFound, first_diff, load_session_log, verify_session
from schemas.states import STATES


@pytest.fixture
def mstore():
    name = f"test_{uuid.uuid4().hex[:12]}"
    s = connect(f"mongomock://{name}")
    yield s
    s.client.drop_database(name)
    s.close()


@pytest.fixture
def two_cycles(mstore):
    first = run_state_machine("AAPL,MSFT", "2012-06-01", store=mstore)
    run_state_machine("AAPL,MSFT", "2012-06-04", store=mstore, session_id=first.session_id)
    return first.session_id


def copy_session(store, source: str, target: str, *, skip_seqs=(), stop_after=None, edit=None) -> None:
    """A copy of a recorded session under a new id (new event ids, same seqs), optionally altered."""
    for ev in store.events.read(source):
        if ev["seq"] in skip_seqs or (stop_after is not None and ev["seq"] > stop_after):
            continue
        ev = {**ev, "session_id": target, "event_id": uuid.uuid4().hex}
        if edit:
            ev = edit(ev)
        store.events.insert_raw(ev)


def test_reconstructs_both_cycles_and_all_transitions(mstore, two_cycles):
    s = load_session_log(mstore, two_cycles)
    assert len(s.cycles) == 2 and s.gap_free and not s.warnings()
    c1 = s.cycles[0]
    assert [t["to"] for t in c1.transitions] == list(STATES) + ["END"]
    assert len(c1.transitions) == 9  # 8 state entries + the exit to END
    assert set(c1.contracts) == set(STATES)
    assert c1.status == "completed" and not c1.cut_off
    # every LLM request paired with its response, every tool call with its result
    assert c1.llm_calls and all(c.answered and c.response_seq > c.seq for c in c1.llm_calls)
    assert c1.tool_calls and all(t.answered for t in c1.tool_calls)
    assert c1.tokens["total_tokens"] == sum(c.usage["total_tokens"] for c in c1.llm_calls)
    assert c1.trades and c1.trades == c1.contracts["EXECUTING"]["data"]["result"]["executed_trades"]
    assert any(v.get("schema") == "Plan" for v in c1.validations)
    json.dumps(s.to_dict())  # the --json form is plain data


def test_unknown_session_raises(mstore):
    with pytest.raises(SessionNotFound):
        load_session_log(mstore, "no-such-session")


def test_seq_gap_and_cut_off_are_reported(mstore, two_cycles):
    copy_session(mstore, two_cycles, "gappy", skip_seqs={50})
    s = load_session_log(mstore, "gappy")
    assert s.seq_gaps == [(50, 50)] and any("seq gap" in w and "50" in w for w in s.warnings())
    copy_session(mstore, two_cycles, "cut", stop_after=60)
    s = load_session_log(mstore, "cut")
    assert len(s.cycles) == 1 and s.cycles[0].cut_off and s.cycles[0].status == "cut_off"
    assert any("cut off" in w for w in s.warnings())


def test_verify_identical_and_never_writes_the_source(mstore, two_cycles):
    before = mstore.events.read(two_cycles)
    report = verify_session(mstore, two_cycles)
    assert report.identical, report.first_divergence and report.first_divergence.describe()
    assert [len(c.compared_states) for c in report.cycles] == [8, 8]
    assert mstore.events.read(two_cycles) == before
    replay = load_session_log(mstore, report.replay_session_id)
    assert replay.replay_of == two_cycles and replay.gap_free
    assert [c.cycle_id for c in replay.cycles] == [c.cycle_id for c in load_session_log(mstore, two_cycles).cycles]
    # a second verify gets its own session
    assert verify_session(mstore, two_cycles).replay_session_id.endswith("-2")


def _short_manager(ev):
    p = ev["payload"]
    if ev["kind"] == "llm_response" and ev["state"] == "DEBATE" and '"winner": "LONG"' in (p.get("text") or ""):
        verdict = json.loads(p["text"])
        if "manager_rationale" in verdict and not _short_manager.done:
            _short_manager.done = True
            verdict["winner"] = "SHORT"
            ev = {**ev, "payload": {**p, "text": json.dumps(verdict, sort_keys=True)}}
    return ev


def test_altered_llm_response_diverges_at_debate(mstore, two_cycles):
    _short_manager.done = False
    copy_session(mstore, two_cycles, "altered", edit=_short_manager)
    assert _short_manager.done
    report = verify_session(mstore, "altered")
    assert not report.identical
    d = report.first_divergence
    assert d.state == "DEBATE" and d.cycle_id.endswith(":c1")
    print(d.describe())
    # the recorded contract says LONG; replaying the altered answer makes the manager pick SHORT
    assert d.path == "results[0].winner" and (d.recorded, d.replayed) == ("LONG", "SHORT")


def test_first_diff_paths():
    assert first_diff({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ("a[1].b", 2, 3)
    assert first_diff({"a": 1}, {"a": 1}) is None
    assert first_diff([1], [1, 2]) == ("[1]", "<missing>", 2)
    assert first_diff({"x": True}, {"x": 1}) == ("x", True, 1)
