"""The look-ahead audit reads a recording and lists what a cycle saw before it was known: a clean cycle has none;
a bar, a headline, a filing or a memory doctored in after the decision time is named, with the cycle and where."""
from __future__ import annotations

import copy

import pytest

from agent.data.news import NewsSource
from graph.services.backtest.loop import run_backtest
from graph.services.replay.lookahead import LookaheadReport, audit_events, audit_sessions
from graph.machine.runner import run_cycle
from schemas.simulation import EpisodeConfig
from tests.helpers import mock_store, runtime_with


@pytest.fixture(scope="module")
def recorded():
    store = mock_store()
    rt = runtime_with()
    # headlines on both sides of the 2012-06-01 close (16:00 EDT = 20:00 UTC): only the earlier one is known
    rt.news = NewsSource([{"symbol": "AAPL", "published_at": "2012-06-01T19:59:00Z", "headline": "Apple beats"},
                          {"symbol": "AAPL", "published_at": "2012-06-01T20:01:00Z", "headline": "Apple probe"}])
    out = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=rt)
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


@pytest.mark.parametrize("doctor, kind, dated", [
    # the next day's bar slipped into a bundle's history
    (lambda snap: snap["bundle"]["history"].append({**snap["bundle"]["history"][-1], "date": "2012-06-04"}),
     "bar", "2012-06-04"),
    # a headline published at the close itself is not known before it
    (lambda snap: snap["bundle"]["news"]["items"].insert(0, {**snap["bundle"]["news"]["items"][0],
                                                             "published_at": "2012-06-01T20:00:00Z"}),
     "news", "2012-06-01T20:00:00Z"),
    # a filing stamped with the decision date alone counts as after that day's close
    (lambda snap: snap["bundle"]["fundamentals"].update(reported_at="2012-06-01"), "filing", "2012-06-01"),
])
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
        extra = {**events[-1], "seq": seq + 1, "kind": "retrieval", "state": "ANALYZING",
                 "payload": {"agent": "news", "symbol": "AAPL", "query": "AAPL news", "filter": {},
                             "hits": [{"id": "m1", "known_at": known}]}}
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
    config = EpisodeConfig(episode_id="la", tickers=["AAPL"], initial_cash=100_000, start="2012-05-29",
                           end="2012-05-31")
    run_backtest(config, store, progress=False, runtime=runtime_with(), out_dir=tmp_path)
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
