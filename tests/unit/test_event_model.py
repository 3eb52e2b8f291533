"""The audit log's typed contract (schemas/events.py): every event a cycle writes parses into its kind's model, a
doctored one is refused naming what is wrong, every cycle that ends says how in a `cycle_ended` event equal to the
status the runner returned, and readers take that status rather than guessing it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from graph.machine.recording import build_session_log, load_session_log
from graph.machine.runner import approve_cycle, run_state_machine
from schemas import events as ev
from schemas.base import CycleStatus, RecordedStatus
from schemas.events import EVENT_KINDS, PAYLOADS, EventParseError, parse_event, upcaster
from tests.helpers import mock_store, services_with

ROOT = Path(__file__).resolve().parents[2]


def _cycle_events(store, out) -> list[dict]:
    return [e for e in store.events.read(out.session_id) if e["cycle_id"] == out.cycle_id]


def _assert_ended_as(store, out, status: str) -> list[dict]:
    """Every event parses; the cycle's last one is its cycle_ended carrying the status returned; replay reads it."""
    events = _cycle_events(store, out)
    typed = [parse_event(e) for e in events]
    assert [t.kind for t in typed].count("cycle_ended") == 1
    assert typed[-1].kind == "cycle_ended" and typed[-1].state == "RUNNER"
    assert out.status == status == typed[-1].payload.status
    cycle = next(c for c in load_session_log(store, out.session_id).cycles if c.cycle_id == out.cycle_id)
    assert cycle.recorded_status == cycle.status == status and not cycle.cut_off
    return events


def test_every_event_of_a_completed_cycle_parses_and_it_ends_completed():
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    events = _assert_ended_as(store, out, "completed")
    assert out.events == len(events)  # the cycle_ended is counted in the outcome: written before the writer closed
    kinds = {e["kind"] for e in events}
    assert {
        "manifest",
        "transition",
        "llm_request",
        "llm_response",
        "tool_call",
        "tool_result",
        "contract",
        "validation",
        "retrieval",
        "cycle_ended",
    } <= kinds
    transition = parse_event(next(e for e in events if e["kind"] == "transition"))
    assert (transition.payload.from_, transition.payload.to) == ("START", "SCANNING")


def test_a_failed_cycle_ends_failed():
    store = mock_store()
    bad = json.dumps({"symbol": "AAPL", "winner": "SIDEWAYS", "conviction": 0.5, "manager_rationale": "x"})
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with({"ManagerVerdict": [bad] * 3}))
    events = _assert_ended_as(store, out, "failed")
    assert any(parse_event(e).kind == "error" for e in events)


def test_a_degraded_cycle_ends_degraded():
    store = mock_store()
    out = run_state_machine(
        "AAPL", "2011-10-10", store=store, services=services_with({"AnalystNote": ["{}"] * 6}, max_repair_retries=2)
    )
    _assert_ended_as(store, out, "degraded")


def test_a_rejected_decision_ends_rejected():
    from graph.machine.builder import build_graph
    from graph.machine.nodes.deciding import deciding

    def oversized(state, config):  # ten times the sized quantity: the risk engine refuses it
        cmd = deciding(state, config)
        for o in cmd.update["decision"]["orders"]:
            o["quantity"] *= 10
        return cmd

    store = mock_store()
    out = run_state_machine(
        "AAPL,MSFT",
        "2012-06-01",
        store=store,
        services=services_with(),
        graph=build_graph(overrides={"DECIDING": oversized}),
    )
    _assert_ended_as(store, out, "rejected")


def test_a_failure_after_the_fill_ends_executed_with_errors():
    unlimited = run_state_machine("AAPL,MSFT", "2012-06-01", store=mock_store(), services=services_with())
    store = mock_store()  # every call but MEMORIZING's last: the budget runs out after EXECUTING filled
    out = run_state_machine(
        "AAPL,MSFT", "2012-06-01", store=store, services=services_with(max_llm_calls=unlimited.llm_calls - 1)
    )
    _assert_ended_as(store, out, "executed_with_errors")


def test_a_paused_cycle_has_no_cycle_ended_until_it_is_decided():
    store = mock_store()
    paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), approve=True)
    assert paused.status == "pending_approval"
    assert not [e for e in _cycle_events(store, paused) if e["kind"] == "cycle_ended"]
    assert load_session_log(store, paused.session_id).cycles[-1].status == "pending_approval"  # inferred, as before
    out = approve_cycle(paused.session_id, store=store, approved=False, by="tester", services=services_with())
    _assert_ended_as(store, out, "rejected")


def test_a_crash_the_runner_catches_ends_failed_after_its_error():
    class Crashing:
        def invoke(self, inputs, config, context=None):
            raise RuntimeError("the graph blew up")

    store = mock_store()
    first = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    with pytest.raises(RuntimeError, match="blew up"):
        run_state_machine(
            "AAPL", "2012-06-04", store=store, session_id=first.session_id, services=services_with(), graph=Crashing()
        )
    events = [e for e in store.events.read(first.session_id) if e["cycle_id"] != first.cycle_id]
    session_id = first.session_id
    assert [e["kind"] for e in events] == ["manifest", "error", "cycle_ended"]
    assert parse_event(events[-1]).payload.status == "failed"
    cycle = load_session_log(store, session_id).cycles[-1]
    assert cycle.status == "failed" and not cycle.cut_off  # it ended (badly), it was not cut off


def test_a_crash_out_of_the_graph_after_the_fill_ends_executed_with_errors():
    """An exception no node catches (a Ctrl-C in MEMORIZING) after EXECUTING filled: the orders stand, so the cycle
    never ends `failed`: the runner asks the execution ledger."""
    from graph.machine.builder import build_graph

    def interrupted(state, config):
        raise KeyboardInterrupt

    store = mock_store()
    with pytest.raises(KeyboardInterrupt):
        run_state_machine(
            "AAPL,MSFT",
            "2012-06-01",
            store=store,
            services=services_with(),
            graph=build_graph(overrides={"MEMORIZING": interrupted}),
        )
    [session_id] = [s["session_id"] for s in store.events.sessions()]
    events = store.events.read(session_id)
    assert [e["kind"] for e in events[-2:]] == ["error", "cycle_ended"]
    assert store.executions.get(events[-1]["cycle_id"]) is not None  # it did fill
    assert parse_event(events[-1]).payload.status == "executed_with_errors"
    assert load_session_log(store, session_id).cycles[-1].status == "executed_with_errors"


def test_a_crash_whose_store_cannot_say_leaves_the_status_to_the_log(monkeypatch):
    """The ledger cannot be asked after the crash (the store is what failed): no cycle_ended is written rather than
    a guess (`failed` would say nothing executed), and a reader sees a cycle cut off after its EXECUTING contract."""
    from graph.machine import runner
    from graph.machine.builder import build_graph

    def interrupted(state, config):
        raise KeyboardInterrupt

    def unreachable(store, cycle_id):
        raise ConnectionError("store gone")

    store = mock_store()
    monkeypatch.setattr(runner, "_ledger_entry", unreachable)
    with pytest.raises(KeyboardInterrupt):
        run_state_machine(
            "AAPL,MSFT",
            "2012-06-01",
            store=store,
            services=services_with(),
            graph=build_graph(overrides={"MEMORIZING": interrupted}),
        )
    [session_id] = [s["session_id"] for s in store.events.sessions()]
    events = store.events.read(session_id)
    assert events[-1]["kind"] == "error" and "cycle_ended" not in [e["kind"] for e in events]
    cycle = load_session_log(store, session_id).cycles[-1]
    # read as the log shows it, a cycle that never reached its end, with the execution it recorded
    assert cycle.status == "cut_off" and cycle.contracts["EXECUTING"]["data"]["status"] != "hold"


def test_replay_reads_the_recorded_status_and_infers_only_without_one():
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    events = store.events.read(out.session_id)
    doctored = copy.deepcopy(events)
    doctored[-1]["payload"]["status"] = "rejected"  # what it says wins over what the other events suggest
    assert build_session_log(out.session_id, doctored).cycles[0].status == "rejected"
    before = events[:-1]  # a recording from before cycle_ended: inferred as it always was
    assert build_session_log(out.session_id, before).cycles[0].status == "completed"
    cut = [e for e in events if not (e["kind"] == "transition" and e["payload"]["to"] == "END")][:-1]
    cycle = build_session_log(out.session_id, cut).cycles[0]
    assert cycle.status == "cut_off" and cycle.cut_off


# ---------------------------------------------------------------------------- parse_event refuses
@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    store = mock_store()
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    return store.events.read(out.session_id)


def _first(events, kind) -> dict:
    return copy.deepcopy(next(e for e in events if e["kind"] == kind))


def test_an_unknown_kind_is_refused_by_name(recorded):
    doc = _first(recorded, "transition")
    doc["kind"] = "teleport"
    with pytest.raises(EventParseError, match=r"unknown event kind 'teleport'"):
        parse_event(doc)


@pytest.mark.parametrize(
    "kind,doctor,field",
    [
        ("transition", lambda p: p.pop("to"), "payload.to"),
        ("transition", lambda p: p.update(to=7), "payload.to"),
        ("transition", lambda p: p.update(approved_by="mallory"), "payload.approved_by"),  # a field no writer writes
        ("llm_response", lambda p: p.update(usage="lots"), "payload.usage"),
        ("contract", lambda p: p.update(data=["not", "an", "object"]), "payload.data"),
        ("validation", lambda p: p.pop("ok"), "payload.ok"),
        ("cycle_ended", lambda p: p.update(status="great"), "payload.status"),
    ],
)
def test_a_doctored_payload_is_refused_naming_its_kind_and_field(recorded, kind, doctor, field):
    doc = _first(recorded, kind)
    parse_event(copy.deepcopy(doc))  # control: the stored one parses
    doctor(doc["payload"])
    with pytest.raises(EventParseError, match=rf"bad {kind} event: {re.escape(field)}"):
        parse_event(doc)


def test_an_envelope_without_its_session_or_from_the_future_is_refused(recorded):
    doc = _first(recorded, "transition")
    doc.pop("session_id")
    with pytest.raises(EventParseError, match="session_id"):
        parse_event(doc)
    doc = _first(recorded, "transition")
    doc["schema_version"] = ev.SCHEMA_VERSION + 1
    with pytest.raises(EventParseError, match="schema_version"):
        parse_event(doc)


# ---------------------------------------------------------------------------- versions
def test_an_upcaster_lifts_an_older_payload_before_it_is_validated(recorded, monkeypatch):
    """As a change to a payload would ship: the next version renames transition's `to` (say) and registers the
    lift."""
    today = ev.SCHEMA_VERSION
    monkeypatch.setattr(ev, "SCHEMA_VERSION", today + 1)
    monkeypatch.setattr(ev, "UPCASTERS", dict(ev.UPCASTERS))  # the registration below stays in this test
    doc = _first(recorded, "transition")
    assert doc["schema_version"] == today
    doc["payload"]["target"] = doc["payload"].pop("to")  # the stored shape, in this made-up history
    with pytest.raises(EventParseError, match="payload.to"):  # without the upcaster, the old shape is refused
        parse_event(copy.deepcopy(doc))

    @upcaster("transition", today)
    def _renamed(payload):
        payload["to"] = payload.pop("target")
        return payload

    typed = parse_event(doc)
    assert typed.payload.to == "SCANNING" and typed.schema_version == today + 1
    assert doc["payload"]["target"] == "SCANNING"  # the stored document itself is never rewritten
    with pytest.raises(ValueError, match="two upcasters"):
        upcaster("transition", today)(_renamed)
    with pytest.raises(ValueError, match="two upcasters"):  # a payload upcaster where a kind upcaster is, too
        upcaster("validation", 1)(_renamed)


def _v1_validation(payload: dict) -> dict:
    return {
        "event_id": "e1",
        "session_id": "s",
        "cycle_id": "s:c1",
        "seq": 7,
        "ts": 1.0,
        "state": "SCANNING",
        "kind": "validation",
        "payload": payload,
        "schema_version": 1,
        "hash": "h",
        "prev_hash": None,
    }


@pytest.mark.parametrize(
    "v1, kind, payload",
    [
        (
            {
                "schema": "DividendCredit",
                "check": "dividend",
                "ok": True,
                "symbol": "AAPL",
                "date": "2012-08-09",
                "per_share": 2.65,
                "quantity": 10.0,
                "amount": 26.5,
            },
            "dividend_paid",
            {"symbol": "AAPL", "date": "2012-08-09", "per_share": 2.65, "quantity": 10.0, "amount": 26.5},
        ),
        (
            {
                "schema": "ClosedTrade",
                "check": "exit_stop",
                "ok": True,
                "symbol": "AAPL",
                "date": "2012-06-04",
                "price": 94.0,
                "realized_pnl": -60.0,
            },
            "position_exited",
            {"symbol": "AAPL", "reason": "stop", "date": "2012-06-04", "price": 94.0, "realized_pnl": -60.0},
        ),
        (
            {
                "schema": "AnalystNote",
                "check": "abstention",
                "ok": True,
                "symbol": "AAPL",
                "analyst": "news",
                "reason": "no news",
            },
            "abstained",
            {"symbol": "AAPL", "analyst": "news", "reason": "no news"},
        ),
        (
            {"schema": "HumanApproval", "check": "human_approval", "ok": False, "by": "alice", "comment": "too big"},
            "approval_decided",
            {"approved": False, "by": "alice", "comment": "too big"},
        ),
        (
            {"schema": "HumanApproval", "check": "approval_refused_stale", "ok": False, "error": "stale"},
            "validation",
            {"schema_": "HumanApproval", "check": "approval_refused_stale", "ok": False, "error": "stale"},
        ),
        ({"schema": "Plan", "attempt": 1, "ok": True}, "validation", {"schema_": "Plan", "ok": True}),
    ],
)
def test_a_version_1_validation_is_read_as_the_kind_it_is_now(v1, kind, payload):
    """Schema version 2 gave dividends, exits, abstentions and human approvals kinds of their own; a version 1 log
    holds them as `validation` events and parse_event reads them as today's writers write them. The checks that
    are checks (a refused approval, a schema's validation) stay validations. The stored document is not touched:
    the hash chain is over it."""
    doc = _v1_validation(v1)
    stored = copy.deepcopy(doc)
    typed = parse_event(doc)
    assert typed.kind == kind and type(typed) is ev.EVENTS[kind]
    assert typed.schema_version == ev.SCHEMA_VERSION and (typed.seq, typed.hash) == (7, "h")
    assert {k: v for k, v in typed.payload.model_dump(exclude_unset=True).items() if k in payload} == payload
    assert doc == stored


def test_a_version_1_approval_that_does_not_fit_is_named_as_read_and_as_stored():
    doc = _v1_validation({"schema": "HumanApproval", "check": "human_approval", "ok": "maybe", "by": "alice"})
    with pytest.raises(
        EventParseError,
        match=r"seq 7 .*bad approval_decided event \(stored as a validation event of "
        r"schema_version 1\): payload.approved",
    ):
        parse_event(doc)


# ---------------------------------------------------------------------------- one model, one factory
def test_every_kind_has_one_payload_model_and_statuses_are_one_literal():
    assert set(PAYLOADS) == set(EVENT_KINDS)
    from typing import get_args

    assert set(get_args(RecordedStatus)) == set(get_args(CycleStatus)) | {"cut_off"}
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| `status` | Meaning | Exit |") :].split("\n\n")[0]  # README's status table
    table = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)[1:]  # its first column, below the header
    assert set(get_args(CycleStatus)) == set(table)


def test_each_kind_is_a_class_of_its_own_that_parse_event_returns(recorded):
    """One class per kind (`kind: Literal[...]`, its payload's model), so `match`/`isinstance` narrow for a checker
    (mypy reads `payload.to` of a TransitionEvent as str; with the create_model union it saw only `Payload`)."""
    from typing import get_args, get_type_hints

    for kind, cls in ev.EVENTS.items():
        hints = get_type_hints(cls)
        assert get_args(hints["kind"]) == (kind,) and hints["payload"] is PAYLOADS[kind], kind
        assert cls.__name__ in vars(ev), f"{cls.__name__} is written out in schemas/events.py, not built"
    seen = set()
    for doc in recorded:
        typed = parse_event(doc)
        assert type(typed) is ev.EVENTS[doc["kind"]]
        match typed:
            case ev.TransitionEvent(payload=ev.TransitionPayload(to=to)):
                seen.add(("transition", to))
            case ev.LlmResponseEvent():
                seen.add(("llm_response", type(typed.payload.usage).__name__))
    assert ("transition", "SCANNING") in seen and ("llm_response", "Usage") in seen


def test_no_writer_builds_an_event_envelope_by_hand():
    """new_event (schemas/events.py) is the one place an event document is made."""
    by_hand = []
    for path in [*ROOT.glob("agent/**/*.py"), *ROOT.glob("graph/**/*.py"), *ROOT.glob("database/**/*.py")]:
        text = path.read_text()
        if re.search(r"[\"']schema_version[\"']\s*:\s*SCHEMA_VERSION", text):
            by_hand.append(str(path.relative_to(ROOT)))
    assert by_hand == []


def test_the_events_written_after_a_cycle_parse_and_leave_its_status_alone():
    """Idempotency-key uses (graph/kernel/idempotent.py) and failed telemetry exports (graph/services/telemetry/live.py)
    come after the cycle's cycle_ended, written by their own writers."""
    from graph.services.telemetry import live
    from graph.transports.client import Client

    store = mock_store()
    with Client.local(store) as client:
        first = client.run_cycle(["AAPL"], "2012-06-01", memory="off", idempotency_key="k-1")
        again = client.run_cycle(["AAPL"], "2012-06-01", memory="off", idempotency_key="k-1")
    assert first == again
    live._failed(
        store,
        first.session_id,
        first.cycle_id,
        "http://collector.invalid",
        RuntimeError("refused"),
        skipped=False,
        error="refused",
    )
    typed = [parse_event(e) for e in store.events.read(first.session_id)]
    assert [t.kind for t in typed][-4:] == ["cycle_ended", "idempotency", "idempotency", "telemetry"]
    assert [t.payload.use for t in typed if t.kind == "idempotency"] == ["first", "repeat"]
    assert typed[-1].payload.error == "refused" and not typed[-1].payload.ok
    assert load_session_log(store, first.session_id).cycles[0].status == first.status == "completed"


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_idempotency_events_replay_is_read_as_a_repeat(version):
    """Schema version 3 renamed a key's later use from `replay` to `repeat`: a stored older event is read as the
    new word, the stored document keeps the old one, and the other uses pass unchanged."""
    doc = {**_v1_validation({}), "kind": "idempotency", "schema_version": version}
    for stored, read in (("replay", "repeat"), ("first", "first"), ("mismatch", "mismatch")):
        doc["payload"] = {"key": "k", "use": stored, "capability": "run_cycle", "transport": "http"}
        assert parse_event(doc).payload.use == read and doc["payload"]["use"] == stored
