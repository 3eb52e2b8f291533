"""A session's audit log read back: `load_session_log` turns the flat, seq-ordered `state_events` into cycles → states →
contracts, LLM calls (request and response paired by run_id), tool calls (call and result paired by run_id),
validations, trades and errors, with ONE query and one pass, so it stays linear in the session's size. Integrity
problems (a seq gap, a cycle that never reached END, a schema version this code does not speak) are reported on the
SessionLog, never hidden. Replay, telemetry and the session summaries read recordings through this module.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, cast

from database.connection import Store
from database.sessions import use_cycle_reader
from graph.machine.errors import SessionNotFound
from schemas.base import SCHEMA_VERSION, RecordedStatus
from schemas.events import (
    AbstainedEvent,
    AnyEvent,
    ApprovalDecidedEvent,
    ContractEvent,
    CycleEndedEvent,
    DividendPaidEvent,
    ErrorEvent,
    EventParseError,
    LlmRequestEvent,
    LlmResponseEvent,
    ManifestEvent,
    PositionExitedEvent,
    RetrievalEvent,
    ToolCallEvent,
    ToolResultEvent,
    TransitionEvent,
    ValidationEvent,
    parse_event,
)
from schemas.states import STATES

REPLAY_STATE = "REPLAY"  # state name of the linking events a replay session starts and ends with


class SchemaVersionMismatch(ValueError):
    """The recording was written under another schema version: its contracts can't be compared as-is."""


# ---------------------------------------------------------------------------- structure
@dataclass
class LlmCall:
    seq: int
    state: str
    run_id: Optional[str]
    model: Optional[str]
    messages: list[dict]
    tools: list[str]
    structured_output: Optional[str]
    response_seq: Optional[int] = None
    text: Any = None
    tool_calls: list[dict] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    latency_ms: Optional[float] = None
    error: Optional[str] = None
    answered: bool = False  # False: the request has no recorded response (cut-off log)
    invalid_tool_calls: list[dict] = field(default_factory=list)  # arguments that were not JSON, kept raw
    finish_reason: Optional[str] = None
    # where the request and its answer sit in the log, for the spans (graph/services/telemetry/spans.py)
    ts: Optional[float] = None
    response_ts: Optional[float] = None
    event_id: Optional[str] = None
    attempt: Optional[int] = None
    requested: bool = True  # False: an answer whose request is not on the record


@dataclass
class ToolCall:
    seq: int
    state: str
    run_id: Optional[str]
    name: str
    args: Any
    result: Any = None
    error: Optional[str] = None
    latency_ms: Optional[float] = None
    answered: bool = False
    ts: Optional[float] = None
    result_ts: Optional[float] = None
    event_id: Optional[str] = None
    requested: bool = True  # False: a result whose call is not on the record


@dataclass
class Cycle:
    cycle_id: str
    index: int
    first_seq: int
    last_seq: int
    transitions: list[dict] = field(default_factory=list)
    states: list[str] = field(default_factory=list)  # states entered, in order
    contracts: dict[str, dict] = field(default_factory=dict)  # state -> {name, data, seq}
    llm_calls: list[LlmCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    validations: list[dict] = field(default_factory=list)  # the checks: schemas, risk, mandate, refusals
    # what the scan settled, who had nothing to say and each human decision recorded, each {seq, state, **its payload}
    approvals: list[dict] = field(default_factory=list)
    dividends: list[dict] = field(default_factory=list)
    exits: list[dict] = field(default_factory=list)
    abstentions: list[dict] = field(default_factory=list)
    # each agent's recalled past notes: {agent, symbol, query, filter, hits}
    retrievals: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    trades: list[dict] = field(default_factory=list)
    ended: bool = False  # a transition to END was recorded
    # the status the runner recorded in the cycle's `cycle_ended` event; None: none recorded (the cycle was cut off
    # or paused, or was recorded before cycles ended with one), and `status` is inferred from its other events
    recorded_status: Optional[RecordedStatus] = None
    manifest: Optional[dict] = None  # the cycle's effective configuration, as recorded
    inputs: Optional[dict] = None  # the cycle's recorded inputs (from its manifest)
    approval: Optional[dict] = None  # the recorded human decision {approved, by}, if the cycle paused
    status: RecordedStatus = "cut_off"
    tokens: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
    events: int = 0

    @property
    def cut_off(self) -> bool:
        """The log stops before the cycle ended: no transition to END and no `cycle_ended` (a crash the runner
        caught records one, failed)."""
        return not self.ended and self.recorded_status is None

    @property
    def paused(self) -> bool:
        """Waiting for a human decision before EXECUTING, not broken off."""
        return self.status == "pending_approval"


@dataclass
class SessionLog:
    session_id: str
    events: int
    cycles: list[Cycle]
    first_ts: Optional[float]
    last_ts: Optional[float]
    seq_gaps: list[tuple[int, int]]  # missing (from, to) seq ranges, inclusive
    schema_versions: list[int]
    replay_of: Optional[str] = None  # set on a replay session: the session it re-executed
    chain: Optional[dict] = None  # EventStore.verify_chain's answer, when it was asked for

    @property
    def gap_free(self) -> bool:
        return not self.seq_gaps

    @property
    def schema_mismatch(self) -> bool:
        """A version this code cannot read; an older one is read through the upcasters (schemas/events.py)."""
        return any(not 1 <= v <= SCHEMA_VERSION for v in self.schema_versions)

    def warnings(self) -> list[str]:
        out = []
        for lo, hi in self.seq_gaps:
            out.append(f"seq gap: event(s) {lo}" + (f"..{hi}" if hi != lo else "") + " missing from the log")
        if self.chain is not None and not self.chain["ok"]:
            broken = self.chain["first_broken"]
            out.append(f"hash chain broken at seq {broken['seq']}: {broken['reason']}")
        for c in self.cycles:
            if c.cut_off and not c.paused:
                last = c.states[-1] if c.states else "?"
                out.append(f"cycle {c.cycle_id} is cut off: no transition to END (last state {last})")
        if self.schema_mismatch:
            out.append(f"schema_version {self.schema_versions} recorded; this code reads 1..{SCHEMA_VERSION}")
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seq_gaps"] = [list(g) for g in self.seq_gaps]
        d["gap_free"] = self.gap_free
        d["warnings"] = self.warnings()
        for c, cd in zip(self.cycles, d["cycles"]):
            cd["cut_off"] = c.cut_off
        return d


# ---------------------------------------------------------------------------- reconstruct
def load_session_log(store: Store, session_id: str, *, check_chain: bool = False) -> SessionLog:
    """One indexed query for the whole session, then one pass in memory; the hash chain (a second
    read) only when asked."""
    with _gc_paused():
        events = store.events.read(session_id)
        if not events:
            if check_chain and store.events.heads.get(session_id) is not None:
                # every event deleted: the session is gone from the log, not from its chain head
                return SessionLog(session_id, 0, [], None, None, [], [], chain=store.events.verify_chain(session_id))
            # a deleted session says when, by whom, what it was
            raise SessionNotFound(store.admin_log.unknown_session(session_id))
        session = build_session_log(session_id, events)
    if check_chain:
        session.chain = store.events.verify_chain(session_id)
    return session


@contextlib.contextmanager
def _gc_paused():
    """Reading and building a session allocates millions of objects that all stay alive; each of them makes
    the cyclic collector's full passes longer, so with it on a reconstruct grows faster than the session
    (x14.5 per x10 events measured at 100k). Nothing made here is garbage until the caller drops it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _gaps(seqs: list[int]) -> list[tuple[int, int]]:
    gaps, expected = [], 1
    for s in seqs:  # sorted by the query
        if s > expected:
            gaps.append((expected, s - 1))
        expected = max(expected, s + 1)
    return gaps


def read_events(events: list[dict]) -> list[AnyEvent]:
    """The stored documents as typed events (schemas/events.py parse_event: older versions upcast first); one this
    code cannot read raises EventParseError naming it (seq, kind, field)."""
    return [parse_event(e) for e in events]


def build_session_log(session_id: str, events: list[dict]) -> SessionLog:
    """The session the stored events make: each read through parse_event, then folded (`fold`)."""
    return fold(session_id, read_events(events), _versions(events))


def _versions(events: list[dict]) -> list[int]:
    # as recorded: parse_event reads every version this code knows as today's
    return sorted({int(e.get("schema_version", SCHEMA_VERSION)) for e in events})


def fold(session_id: str, events: Sequence[AnyEvent], schema_versions: list[int]) -> SessionLog:
    """The one fold of the typed log into cycles, states, calls and trades: replay, verify, the summaries, the
    console and the OpenTelemetry spans (graph/services/telemetry/spans.py) all read a session through it."""
    cycles: dict[str, Cycle] = {}
    # pairing tables: a response finds its request by run_id (unique per LLM / tool invocation)
    open_llm: dict[str, LlmCall] = {}
    open_tool: dict[str, ToolCall] = {}
    replay_of = None
    for ev in events:
        seq, state, cid, rid = ev.seq, ev.state or "RUNNER", ev.cycle_id, ev.run_id
        c = cycles.get(cid)
        if c is None:
            c = cycles[cid] = Cycle(cycle_id=cid, index=len(cycles) + 1, first_seq=seq, last_seq=seq)
        c.last_seq, c.events = seq, c.events + 1
        match ev:
            case TransitionEvent(payload=t):
                c.transitions.append({"seq": seq, "from": t.from_, "to": t.to})
                if t.to == "END":
                    c.ended = True
                elif t.to and t.to not in c.states:
                    c.states.append(t.to)
            case ContractEvent(payload=k):
                c.contracts[state] = {"name": k.name, "data": k.data, "seq": seq}
            case LlmRequestEvent(payload=q):
                call = LlmCall(
                    seq=seq,
                    state=state,
                    run_id=rid,
                    model=q.model,
                    messages=q.messages,
                    tools=q.tools,
                    structured_output=q.structured_output,
                    ts=ev.ts,
                    event_id=ev.event_id,
                    attempt=q.attempt,
                )
                c.llm_calls.append(call)
                if rid:
                    open_llm[rid] = call
            case LlmResponseEvent(payload=r):
                asked = open_llm.pop(rid, None) if rid else None
                if asked is None:  # a response without its request: keep it visible rather than drop it
                    asked = LlmCall(
                        seq=seq,
                        state=state,
                        run_id=rid,
                        model=r.model,
                        messages=[],
                        tools=[],
                        structured_output=None,
                        ts=ev.ts,
                        event_id=ev.event_id,
                        requested=False,
                    )
                    c.llm_calls.append(asked)
                call = asked
                call.response_seq, call.answered, call.response_ts = seq, True, ev.ts
                call.text, call.tool_calls = r.text, r.tool_calls
                call.usage, call.latency_ms, call.error = r.usage.model_dump(exclude_unset=True), r.latency_ms, r.error
                call.invalid_tool_calls, call.finish_reason = r.invalid_tool_calls, r.finish_reason
                u = r.usage
                c.tokens["input_tokens"] += u.input_tokens or 0
                c.tokens["output_tokens"] += u.output_tokens or 0
                c.tokens["total_tokens"] += u.total_tokens or 0
            case ToolCallEvent(payload=tc):
                tool = ToolCall(
                    seq=seq, state=state, run_id=rid, name=tc.name, args=tc.args, ts=ev.ts, event_id=ev.event_id
                )
                c.tool_calls.append(tool)
                if rid:
                    open_tool[rid] = tool
            case ToolResultEvent(payload=tr):
                ran = open_tool.pop(rid, None) if rid else None
                if ran is None:
                    ran = ToolCall(
                        seq=seq,
                        state=state,
                        run_id=rid,
                        name=tr.name,
                        args=None,
                        ts=ev.ts,
                        event_id=ev.event_id,
                        requested=False,
                    )
                    c.tool_calls.append(ran)
                tool = ran
                tool.answered, tool.result, tool.error, tool.latency_ms = True, tr.result, tr.error, tr.latency_ms
                tool.result_ts = ev.ts
            case ManifestEvent(payload=m):
                c.manifest, c.inputs = m.model_dump(exclude_unset=True), m.inputs
            case ValidationEvent(payload=v):
                c.validations.append({"seq": seq, "state": state, **v.model_dump(by_alias=True, exclude_unset=True)})
                if state == REPLAY_STATE and v.replay_of:
                    replay_of = v.replay_of
            case ApprovalDecidedEvent(payload=a):
                c.approval = {"approved": a.approved, "by": a.by, **({"comment": a.comment} if a.comment else {})}
                c.approvals.append({"seq": seq, "state": state, **c.approval})
            case DividendPaidEvent(payload=d):
                c.dividends.append({"seq": seq, "state": state, **d.model_dump()})
            case PositionExitedEvent(payload=x):
                c.exits.append({"seq": seq, "state": state, **x.model_dump()})
            case AbstainedEvent(payload=n):
                c.abstentions.append({"seq": seq, "state": state, **n.model_dump()})
            case ErrorEvent(payload=e):
                c.errors.append({"seq": seq, "state": state, **e.model_dump(exclude_unset=True)})
            case RetrievalEvent(payload=h):
                c.retrievals.append({"seq": seq, "state": state, **h.model_dump()})
            case CycleEndedEvent(payload=end):
                c.recorded_status = end.status
    for c in cycles.values():
        execution = (c.contracts.get("EXECUTING") or {}).get("data") or {}
        scan = (c.contracts.get("SCANNING") or {}).get("data") or {}
        # positions closed on their levels at the scan come first, as they did
        exits = [
            {
                "symbol": e["symbol"],
                "side": "SELL",
                "quantity": e["quantity"],
                "price": e["exit_price"],
                "fees": None,
                "date": e["closed"],
                "reason": e["reason"],
            }
            for e in scan.get("exits") or []
        ]
        c.trades = exits + list((execution.get("result") or {}).get("executed_trades") or [])
        c.status = _status(c)
    return SessionLog(
        session_id=session_id,
        events=len(events),
        cycles=list(cycles.values()),
        first_ts=events[0].ts if events else None,
        last_ts=events[-1].ts if events else None,
        seq_gaps=_gaps([e.seq for e in events]),
        schema_versions=schema_versions,
        replay_of=replay_of,
    )


# what _status and the facts read: the manifest, the states, their contracts, approvals, errors and the recorded end
# (picked by the stored kind: a schema_version 1 approval is stored as a `validation`, parse_event moves it)
_STATUS_KINDS = frozenset(
    {"manifest", "transition", "contract", "validation", "approval_decided", "error", "cycle_ended"}
)


def last_cycle_facts(session_id: str, events: list[dict]) -> dict[str, Any]:
    """What a session summary (database/sessions.py) shows of its last cycle, read from that cycle's events the
    way replay reads them: its status, symbols and as-of; and the session a replay session replays. Every writer
    folds its session's summary when it closes, so only the kinds a status is read from are parsed (the calls and
    retrievals, most of a cycle's events, say nothing of it)."""
    try:
        session = build_session_log(session_id, [e for e in events if e.get("kind") in _STATUS_KINDS])
    except EventParseError:  # a listing never vouches for what it cannot read, nor stops the store closing over it
        return {}
    if not session.cycles:  # a "cycle" of operator events only (a broker halt, an idempotency use): no status
        return {}
    cycle = session.cycles[-1]
    inputs = cycle.inputs or {}
    return {
        "status": cycle.status,
        "symbols": inputs.get("symbols") or [],
        "as_of": inputs.get("as_of"),
        "replay_of": session.replay_of,
    }


use_cycle_reader(last_cycle_facts)


def _status(c: Cycle) -> RecordedStatus:
    """The recorded `cycle_ended` status; inferred only for a cycle without one (cut off, paused, or recorded before
    the runner wrote it), the way the runner decides it."""
    if c.recorded_status is not None:
        return c.recorded_status
    if not c.ended:
        validation = (c.contracts.get("VALIDATING") or {}).get("data") or {}
        if (
            (c.inputs or {}).get("approval_required")
            and c.approval is None
            and validation.get("passed")
            and c.states[-1:] == ["VALIDATING"]
        ):
            return "pending_approval"  # the runner stops there until `tradegraph approve`
        return "cut_off"
    memory = (c.contracts.get("MEMORIZING") or {}).get("data") or {}
    if memory.get("status"):
        return cast(RecordedStatus, memory["status"])
    analysis = (c.contracts.get("ANALYZING") or {}).get("data") or {}
    if analysis.get("degraded"):
        return "degraded"
    failed = any(
        e.get("state") in STATES or e.get("state") == "RUNNER"
        for e in c.errors
        if e.get("type") not in NON_FATAL_ERRORS
    )
    if failed and "EXECUTING" in c.contracts:
        return "executed_with_errors"
    return "failed" if failed else "completed"


# error events a cycle records and goes on from (a vote lost, a tool call refused and the model told)
NON_FATAL_ERRORS = (
    "analyst_failed",
    "quant_failed",
    "rebuttal_fallback",
    "tool_refused",
    "invalid_tool_call",
    "tool_steps_exhausted",
    "llm_cache_error",
)


def fatal_error(c: Cycle) -> Optional[dict]:
    """How the recorded cycle failed: {state, type, message} of its last fatal error event, or None."""
    fatal = [e for e in c.errors if e.get("type") not in NON_FATAL_ERRORS]
    if not fatal:
        return None
    e = fatal[-1]
    return {"state": e.get("state"), "type": e.get("type"), "message": e.get("message")}
