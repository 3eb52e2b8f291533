"""Recorded sessions replay against today's code, as Temporal's replayer does with kept histories.

tests/fixtures/recordings/ holds real sessions (scripts/record_fixtures.py says how they were made): a short cycle, a
cycle paused for approval and approved, a 3-point backtest; once as recorded before cycles ended with a `cycle_ended`
event (`v1_before_cycle_ended_*`, commit abffbf7) and once with it (`v1_*`). Each is stored into a fresh store, every
event must parse (schemas/events.py parse_event, upcasters included), the store must recompute the recorded hash
chain, and `verify_session` must re-execute it identical. A change that breaks an old recording fails here."""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from graph.machine.recording import load_session
from graph.services.replay.session import verify_session
from schemas.events import EventParseError, parse_event
from tests.helpers import mock_store

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
FIXTURES = sorted(RECORDINGS.glob("*.jsonl.gz"))


def _load(path: Path) -> tuple[dict, list[dict]]:
    with gzip.open(path, "rt") as f:
        header, *events = [json.loads(line) for line in f]
    return header, events


def _stored(events: list[dict]):
    """A fresh store holding the recording: appended as a writer would (seq and hashes recomputed by the store)."""
    store = mock_store()
    store.events.append([{k: v for k, v in e.items() if k not in ("seq", "prev_hash", "hash")} for e in events])
    return store


def test_the_fixtures_are_there():
    names = {p.name.split("_", 1)[1] if p.name.startswith("v1_") else p.name for p in FIXTURES}
    assert len(FIXTURES) >= 6 and {"short_cycle.jsonl.gz", "approved_cycle.jsonl.gz",
                                   "backtest_3_points.jsonl.gz"} <= names, [p.name for p in FIXTURES]


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name.removesuffix(".jsonl.gz") for p in FIXTURES])
def test_a_recorded_session_parses_and_verifies_identical(path):
    header, events = _load(path)
    assert header["events"] == len(events) > 0
    typed = [parse_event(e) for e in events]  # raises, naming the event, on anything this code cannot read
    assert {t.session_id for t in typed} == {header["session_id"]}

    store = _stored(events)
    stored = store.events.read(header["session_id"])
    # the store computes the recorded chain again: same content, same seqs, same hashes
    assert [(e["seq"], e["prev_hash"], e["hash"]) for e in stored] == \
        [(e["seq"], e["prev_hash"], e["hash"]) for e in events]

    session = load_session(store, header["session_id"], check_chain=True)
    assert session.chain["ok"] and session.gap_free and not session.warnings(), session.warnings()
    ended = {t.cycle_id: t.payload.status for t in typed if t.kind == "cycle_ended"}
    for cycle in session.cycles:  # a recorded status is read as recorded; older ones are inferred as before
        assert cycle.status == ended.get(cycle.cycle_id, cycle.status) and not cycle.cut_off
    if not path.name.startswith("v1_before_cycle_ended"):
        assert set(ended) == {c.cycle_id for c in session.cycles}

    report = verify_session(store, header["session_id"])
    assert report.ok, [d.describe() for v in report.cycles for d in v.divergences] or report.warnings
    assert [v.cycle_id for v in report.cycles] == [c.cycle_id for c in session.cycles]
    assert all(v.compared_states and not v.skipped for v in report.cycles)
    for event in store.events.read(report.replay_session_id):  # what the replay wrote parses too
        parse_event(event)


def test_a_doctored_recording_is_refused_by_parse_event():
    header, events = _load(RECORDINGS / "v1_short_cycle.jsonl.gz")
    contract = copy.deepcopy(next(e for e in events if e["kind"] == "contract"))
    parse_event(contract)  # control
    contract["payload"]["data"] = "the decision was to buy everything"
    with pytest.raises(EventParseError, match=rf"seq {contract['seq']} .*bad contract event: payload.data"):
        parse_event(contract)
