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

from graph.machine.recording import load_session_log
from graph.services.replay.session import verify_session
from schemas.base import SCHEMA_VERSION
from schemas.events import EventParseError, parse_event
from tests.helpers import mock_store

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
FIXTURES = sorted(RECORDINGS.glob("*.jsonl.gz"))
# the kinds schema_version 2 split out of `validation` (schemas/events.py): what a cycle settled, and what was decided
SETTLED, DECIDED = {"dividend_paid", "position_exited"}, {"abstained", "approval_decided"}


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
    assert (
        len(FIXTURES) >= 6
        and {"short_cycle.jsonl.gz", "approved_cycle.jsonl.gz", "backtest_3_points.jsonl.gz"} <= names
    ), [p.name for p in FIXTURES]


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name.removesuffix(".jsonl.gz") for p in FIXTURES])
def test_a_recorded_session_parses_and_verifies_identical(path):
    header, events = _load(path)
    assert header["events"] == len(events) > 0
    typed = [parse_event(e) for e in events]  # raises, naming the event, on anything this code cannot read
    assert {t.session_id for t in typed} == {header["session_id"]}

    store = _stored(events)
    stored = store.events.read(header["session_id"])
    # the store computes the recorded chain again: same content, same seqs, same hashes
    assert [(e["seq"], e["prev_hash"], e["hash"]) for e in stored] == [
        (e["seq"], e["prev_hash"], e["hash"]) for e in events
    ]

    session = load_session_log(store, header["session_id"], check_chain=True)
    assert session.chain["ok"] and session.gap_free and not session.warnings(), session.warnings()
    ended = {t.cycle_id: t.payload.status for t in typed if t.kind == "cycle_ended"}
    for cycle in session.cycles:  # a recorded status is read as recorded; older ones are inferred as before
        assert cycle.status == ended.get(cycle.cycle_id, cycle.status) and not cycle.cut_off
    if not path.name.startswith("v1_before_cycle_ended"):
        assert set(ended) == {c.cycle_id for c in session.cycles}

    # version 1 wrote dividends, exits, abstentions and approvals as `validation` events; they are read as their
    # own kinds, while the store keeps (and chains) them as written; a later version's are read as stored
    for doc, t in zip(stored, typed):
        if doc["schema_version"] > 1:
            assert doc["kind"] == t.kind
            continue
        check = str(doc["payload"].get("check") or "")
        split = check in ("dividend", "abstention", "human_approval") or check.startswith("exit_")
        assert doc["kind"] == ("validation" if split else t.kind) and (t.kind in SETTLED | DECIDED) == split, (
            doc["seq"],
            doc["kind"],
            check,
            t.kind,
        )
    assert any(t.kind == "abstained" for t in typed)
    if "approved_cycle" in path.name:
        assert [(t.state, t.payload.approved, t.payload.by) for t in typed if t.kind == "approval_decided"] == [
            ("EXECUTING", True, "fixture")
        ] and session.cycles[0].approval == {"approved": True, "by": "fixture"}
    if "backtest_3_points" in path.name:
        assert [(t.state, t.payload.reason) for t in typed if t.kind == "position_exited"] == [("SCANNING", "target")]
        assert [x["reason"] for c in session.cycles for x in c.exits] == ["target"]

    report = verify_session(store, header["session_id"])
    assert report.ok, [d.describe() for v in report.cycles for d in v.divergences] or report.warnings
    assert [v.cycle_id for v in report.cycles] == [c.cycle_id for c in session.cycles]
    assert all(v.compared_states and not v.skipped for v in report.cycles)
    replayed = [parse_event(e) for e in store.events.read(report.replay_session_id)]  # what the replay wrote parses
    # like with like: the replay writes today's kinds, and decides what the recording decided (read the same way);
    # it settles nothing again (its scan is the recorded one, compared as the SCANNING contract)
    assert {e.schema_version for e in replayed} == {SCHEMA_VERSION}

    # in the order of each cycle's events, except that a real model's analysts ran on threads: their abstentions
    # were written in the order the threads got there, which a replay need not repeat (compared as a multiset)
    def decided(events):
        return sorted((t.cycle_id, t.kind, t.payload.model_dump_json()) for t in events if t.kind in DECIDED)

    assert decided(replayed) == decided(typed)
    assert not [t for t in replayed if t.kind in SETTLED]


def test_a_doctored_recording_is_refused_by_parse_event():
    header, events = _load(RECORDINGS / "v1_short_cycle.jsonl.gz")
    contract = copy.deepcopy(next(e for e in events if e["kind"] == "contract"))
    parse_event(contract)  # control
    contract["payload"]["data"] = "the decision was to buy everything"
    with pytest.raises(EventParseError, match=rf"seq {contract['seq']} .*bad contract event: payload.data"):
        parse_event(contract)


# ---------------------------------------------------------------------------- older schema versions
def _speak(monkeypatch, version: int) -> None:
    """This code as it would ship at `version`: every module that reads the current version sees it, with the
    upcasters it has today (the test registers the one its made-up change brings, and it goes with the test)."""
    import graph.machine.recording as recording
    import graph.services.replay.session as replay_session
    import schemas.base as base
    from schemas import events as ev

    for module in (base, ev, recording, replay_session):
        monkeypatch.setattr(module, "SCHEMA_VERSION", version)
    monkeypatch.setattr(ev, "UPCASTERS", dict(ev.UPCASTERS))


def _as_version_1_with_target(events: list[dict]) -> list[dict]:
    """The recording as version 1 stored it in a made-up history where a transition's `to` was called `target`
    then (renamed from version 2 on). The hash chain is the store's own again once it is appended (`_stored`)."""
    older = copy.deepcopy(events)
    for e in older:
        assert e["schema_version"] == 1
        if e["kind"] == "transition":
            e["payload"]["target"] = e["payload"].pop("to")
    return older


def test_verify_reads_a_recording_of_an_older_version_through_the_upcasters(monkeypatch):
    """Verify no longer refuses a schema_version other than today's: an older one is read through the upcasters
    and re-executed IDENTICAL; without the upcaster it is unreadable, named; a version no upcaster reaches (0, or
    one from the future) stays a conflict. The next version is spoken, so the recording is read across two steps:
    version 2's real one (the `validation` kind split) and the made-up rename."""
    from graph.services.replay.session import SchemaVersionMismatch
    from schemas.events import upcaster

    header, events = _load(RECORDINGS / "v1_short_cycle.jsonl.gz")
    speaks = SCHEMA_VERSION + 1
    _speak(monkeypatch, speaks)
    store = _stored(_as_version_1_with_target(events))
    sid = header["session_id"]

    report = verify_session(store, sid)  # no upcaster for the rename yet: every transition is refused, by name
    assert not report.ok and not report.cycles
    assert any("bad transition event: payload.to" in line for line in report.unreadable), report.unreadable[:2]

    @upcaster("transition", 1)
    def _renamed(payload: dict) -> dict:
        payload["to"] = payload.pop("target")
        return payload

    session = load_session_log(store, sid, check_chain=True)
    assert session.schema_versions == [1] and not session.schema_mismatch and not session.warnings()
    assert session.cycles[0].states[:2] == ["SCANNING", "PLANNING"] and session.cycles[0].ended
    report = verify_session(store, sid)
    assert report.ok and report.cycles and all(v.compared_states for v in report.cycles), [
        d.describe() for v in report.cycles for d in v.divergences
    ] or report.unreadable[:2]
    for event in store.events.read(report.replay_session_id):  # the replay is written at today's version
        assert event["schema_version"] == speaks and "target" not in event["payload"]
    first = next(e for e in store.events.read(sid) if e["kind"] == "transition")
    assert first["payload"] == {"from": "START", "target": "SCANNING"}  # the recording itself is never rewritten

    for unknown in (0, speaks + 1):
        other = _stored([{**e, "session_id": f"v{unknown}", "schema_version": unknown} for e in events])
        with pytest.raises(SchemaVersionMismatch, match=rf"reads schema_version 1\.\.{speaks}\b"):
            verify_session(other, f"v{unknown}")


def test_the_spans_of_a_version_1_recording_carry_the_split_kinds():
    """The OpenTelemetry spans read the recording through the same upcasters: its approval, abstentions and exit are
    span events of their own kinds, and no `tradegraph.validation` event stands for them any more."""
    from graph.services.telemetry.spans import session_spans

    seen: dict[str, list] = {}
    for name in ("v1_approved_cycle", "v1_backtest_3_points"):
        header, events = _load(RECORDINGS / f"{name}.jsonl.gz")
        for span in session_spans(header["session_id"], events):
            for e in span.events:
                seen.setdefault(e.name, []).append(dict(e.attributes or {}))
    assert [a["tradegraph.approved"] for a in seen["tradegraph.approval_decided"]] == [True]
    assert len(seen["tradegraph.abstained"]) == 4 + 6
    assert [a["tradegraph.exit_reason"] for a in seen["tradegraph.position_exited"]] == ["target"]
    assert not [
        a
        for a in seen["tradegraph.validation"]
        if a.get("tradegraph.check") in ("human_approval", "abstention", "dividend", "exit_target")
    ]


def test_events_by_kind_find_a_version_1_logs_approvals_and_abstentions_under_their_kinds():
    """`tradegraph events --kind approval_decided` (the kernel's read_events) on a log written before schema
    version 2, which stored its approval and abstentions as `validation` events: they are found by the kind they
    are read as, listed as stored, and `--kind validation` lists only the checks."""
    from graph.kernel.core import Kernel

    header, events = _load(RECORDINGS / "v1_approved_cycle.jsonl.gz")
    kernel = Kernel(_stored(events))
    sid = header["session_id"]

    def kinds(kind: str) -> list:
        out = kernel.call("read_events", {"session_id": sid, "kind": kind})
        assert out.total == len(out.events)
        return [(e["kind"], e["payload"].get("check")) for e in out.events]

    assert kinds("approval_decided") == [("validation", "human_approval")]
    assert kinds("abstained") == [("validation", "abstention")] * 4
    checks = kinds("validation")
    assert checks and not {c for _, c in checks} & {"human_approval", "abstention"}
    assert len(kinds("transition")) == sum(e["kind"] == "transition" for e in events)  # a kind no split touches
