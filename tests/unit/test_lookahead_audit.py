"""The look-ahead audit reads a recording and lists what a cycle saw before it was known: a clean cycle has none;
a bar, a headline, a filing or a memory doctored in after the decision time is named, with the cycle and where."""

from __future__ import annotations

import copy

import pytest

from agent.data.news import NewsSource
from graph.machine.runner import run_state_machine
from graph.services.backtest.loop import run_backtest
from graph.services.replay.lookahead import LookaheadReport, audit_events, audit_sessions
from schemas.simulation import EpisodeConfig
from tests.helpers import mock_store, services_with


@pytest.fixture(scope="module")
def recorded():
    store = mock_store()
    rt = services_with()
    # headlines on both sides of the 2012-06-01 close (16:00 EDT = 20:00 UTC): only the earlier one is known
    rt.news = NewsSource(
        [
            {"symbol": "AAPL", "published_at": "2012-06-01T19:59:00Z", "headline": "Apple beats"},
            {"symbol": "AAPL", "published_at": "2012-06-01T20:01:00Z", "headline": "Apple probe"},
        ]
    )
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=rt)
    return store, out, store.events.read(out.session_id)


def _scan(events):
    return next(e for e in events if e["kind"] == "contract" and e["state"] == "SCANNING")


def test_a_clean_cycle_has_no_leak_and_every_kind_of_evidence_is_checked(recorded):
    store, out, events = recorded
    [cycle] = audit_events(events)
    assert cycle.cycle_id == out.cycle_id and cycle.leaks == [] and cycle.note is None
    # a close decision on 2012-06-01 (EDT): 16:00 New York
    assert cycle.decision_time == "2012-06-01T20:00:00"
    assert cycle.checked["bar"] > 0 and cycle.checked["news"] > 0 and cycle.checked["filing"] > 0
    report = audit_sessions(store, [out.session_id])
    assert report.leaks == [] and report.checked() == cycle.checked


@pytest.mark.parametrize(
    "doctor, kind, dated",
    [
        # the next day's bar slipped into a bundle's history
        (
            lambda snap: snap["bundle"]["history"].append({**snap["bundle"]["history"][-1], "date": "2012-06-04"}),
            "bar",
            "2012-06-04",
        ),
        # a headline published at the close itself is not known before it
        (
            lambda snap: snap["bundle"]["news"]["items"].insert(
                0, {**snap["bundle"]["news"]["items"][0], "published_at": "2012-06-01T20:00:00Z"}
            ),
            "news",
            "2012-06-01T20:00:00Z",
        ),
        # a filing stamped with the decision date alone counts as after that day's close
        (lambda snap: snap["bundle"]["fundamentals"].update(reported_at="2012-06-01"), "filing", "2012-06-01"),
    ],
)
def test_a_doctored_recording_is_named(recorded, doctor, kind, dated):
    _, out, events = recorded
    events = copy.deepcopy(events)
    doctor(_scan(events)["payload"]["data"]["snapshots"][0])
    [cycle] = audit_events(events)
    assert [(leak.kind, leak.dated) for leak in cycle.leaks] == [(kind, dated)]
    assert cycle.leaks[0].symbol == "AAPL" and "SCANNING contract" in cycle.leaks[0].where
    assert out.cycle_id in cycle.leaks[0].line()


def test_a_memory_known_on_the_decision_day_is_a_leak_and_the_day_before_is_not(recorded):
    _, out, events = recorded
    events = copy.deepcopy(events)
    seq = max(e["seq"] for e in events)
    for known, n in (("2012-05-31", 0), ("2012-06-01", 1)):
        extra = {
            **events[-1],
            "seq": seq + 1,
            "kind": "retrieval",
            "state": "ANALYZING",
            "payload": {
                "agent": "news",
                "symbol": "AAPL",
                "query": "AAPL news",
                "filter": {},
                "hits": [{"id": "m1", "known_at": known}],
            },
        }
        [cycle] = audit_events(events + [extra])
        assert cycle.checked["memory"] == 1 and len(cycle.leaks) == n


def test_deciding_at_the_open_makes_that_days_bar_a_leak(recorded):
    _, _, events = recorded
    events = copy.deepcopy(events)
    manifest = next(e for e in events if e["kind"] == "manifest")
    manifest["payload"]["config"]["decide_at"] = "open"
    [cycle] = audit_events(events)
    # 09:30 New York (EDT) is 13:30 UTC; the cycle's own bar (2012-06-01) closes after it
    assert cycle.decision_time == "2012-06-01T13:30:00"
    assert {leak.dated for leak in cycle.leaks if leak.kind == "bar"} == {"2012-06-01"}


def test_a_backtest_is_audited_with_its_cases(tmp_path):
    store = mock_store()
    config = EpisodeConfig(
        episode_id="la", tickers=["AAPL"], initial_cash=100_000, start="2012-05-29", end="2012-05-31"
    )
    run_backtest(config, store, progress=False, services=services_with(), out_dir=tmp_path)
    report = audit_sessions(store, ["bt-la"])
    assert len(report.cycles) == 3 and report.leaks == []
    assert report.checked()["bar"] > 3 * 20  # each Case's bars and each bundle's history


def test_an_event_the_audit_cannot_read_leaves_its_cycle_unaudited_and_named(recorded):
    """Evidence in an event that is not one of the log's typed events is not skipped as if it were clean."""
    _, out, events = recorded
    events = copy.deepcopy(events)
    tool = next(e for e in events if e["kind"] == "tool_result")
    tool["payload"]["smuggled"] = [{"date": "2012-06-04", "open": 1, "high": 1, "low": 1, "close": 1}]
    [cycle] = audit_events(events)
    assert cycle.note and "cannot be read" in cycle.note and f"seq {tool['seq']}" in cycle.note
    assert "smuggled" in cycle.note
    report = LookaheadReport([out.session_id], [cycle])
    assert report.as_dict()["unaudited"] == [{"cycle_id": out.cycle_id, "note": cycle.note}]


# ---------------------------------------------------------------------------- the chain is checked first (issue 28)
def _leaky_session():
    """A session whose cycle really saw a headline published after its decision (a leak the audit names)."""
    store = mock_store()
    rt = services_with()
    rt.news = NewsSource([{"symbol": "AAPL", "published_at": "2012-06-01T19:59:00Z", "headline": "Apple beats"}])
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=rt)
    return store, out


def _audit_cli(store, target, capsys):
    from graph.transports.cli.main import main

    code = main(["audit", "lookahead", target, "--db", store.uri])
    out, err = capsys.readouterr()
    return code, out + err


def _edit_published_at(store, sid: str, seq: int, value: str) -> None:
    """The first headline's date in SCANNING's stored contract set in place, as a store writer would (no re-hash; the
    payload written back whole, as the pack it was stored in held it)."""
    doc = next(e for e in store.events.read(sid) if e["seq"] == seq)
    doc["payload"]["data"]["snapshots"][0]["bundle"]["news"]["items"][0]["published_at"] = value
    store.db["state_events"].replace_one({"session_id": sid, "seq": seq}, doc)


def test_a_leaked_date_edited_back_in_the_store_fails_the_audit_naming_the_broken_seq(capsys):
    store, out = _leaky_session()
    sid = out.session_id
    scan = next(e for e in store.events.read(sid) if e["kind"] == "contract" and e["state"] == "SCANNING")
    # the leak as a tamperer would find it (the item dated past the close), then its date moved back to hide it
    _edit_published_at(store, sid, scan["seq"], "2012-06-01T20:05:00Z")
    code, text = _audit_cli(store, sid, capsys)
    assert code == 1 and "LEAK" in text and f"BROKEN {sid}: hash chain broken at seq {scan['seq']}" in text
    _edit_published_at(store, sid, scan["seq"], "2012-06-01T13:00:00Z")
    code, text = _audit_cli(store, sid, capsys)
    assert code == 1 and "0 leak(s)" in text and "1 session(s) with a broken hash chain" in text
    assert f"hash chain broken at seq {scan['seq']}: content does not match its hash" in text
    report = audit_sessions(store, [sid])
    assert report.leaks == [] and report.broken == [
        {
            "session_id": sid,
            "seq": scan["seq"],
            "reason": "content does not match its hash (the event was edited after it was written)",
        }
    ]


def test_the_scanning_event_deleted_fails_the_audit(capsys):
    store, out = _leaky_session()
    assert _audit_cli(store, out.session_id, capsys)[0] == 0  # untouched: clean, chain intact
    scan = next(e for e in store.events.read(out.session_id) if e["kind"] == "contract" and e["state"] == "SCANNING")
    store.db["state_events"].delete_one({"session_id": out.session_id, "seq": scan["seq"]})
    code, text = _audit_cli(store, out.session_id, capsys)
    assert code == 1 and f"hash chain broken at seq {scan['seq']}: seq {scan['seq']} is missing" in text
