"""Reconstruct a session from its `state_events`, and verify it by re-executing it.

`load_session` turns the flat, seq-ordered audit log into cycles → states → contracts, LLM calls
(request and response paired by run_id), tool calls (call and result paired by run_id),
validations, trades and errors. It reads the log with ONE query and one pass, so it stays
linear in the session's size. Integrity problems (a seq gap, a cycle that never reached END,
a schema version this code does not speak) are reported on the Session, never hidden.

`verify_session` re-runs each recorded cycle through the real graph from the recording alone: the
manifest's configuration and inputs (a backtest's Case, approval_required), every LLM answer, feature
bundle and execution result, and the human approval decision (graph/replay/model.py); under a new
session `replay-<orig>-<n>`. It compares the contracts state by state and the way a failed cycle
failed, lists every way today's configuration differs from the manifest, and checks the hash chain.
"""
from __future__ import annotations

import contextlib
import gc
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

from database.connection import Store
from database.sessions import use_cycle_reader
from graph.runner import SessionNotFound
from schemas.base import SCHEMA_VERSION
from schemas.states import STATES

__all__ = ["SessionNotFound", "Session", "Cycle", "LlmCall", "ToolCall", "load_session", "build_session",
           "Divergence", "CycleVerdict", "VerifyReport", "SchemaVersionMismatch", "verify_session", "first_diff"]

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


@dataclass
class Cycle:
    cycle_id: str
    index: int
    first_seq: int
    last_seq: int
    transitions: list[dict] = field(default_factory=list)
    states: list[str] = field(default_factory=list)           # states entered, in order
    contracts: dict[str, dict] = field(default_factory=dict)  # state -> {name, data, seq}
    llm_calls: list[LlmCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    validations: list[dict] = field(default_factory=list)
    # each agent's recalled past notes: {agent, symbol, query, filter, hits}
    retrievals: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    trades: list[dict] = field(default_factory=list)
    ended: bool = False  # a transition to END was recorded
    manifest: Optional[dict] = None  # the cycle's effective configuration, as recorded
    inputs: Optional[dict] = None    # the cycle's recorded inputs (from its manifest)
    approval: Optional[dict] = None  # the recorded human decision {approved, by}, if the cycle paused
    status: str = "unknown"
    tokens: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0,
                                                             "total_tokens": 0})
    events: int = 0

    @property
    def cut_off(self) -> bool:
        return not self.ended

    @property
    def paused(self) -> bool:
        """Waiting for a human decision before EXECUTING, not broken off."""
        return self.status == "pending_approval"


@dataclass
class Session:
    session_id: str
    events: int
    cycles: list[Cycle]
    first_ts: Optional[float]
    last_ts: Optional[float]
    seq_gaps: list[tuple[int, int]]    # missing (from, to) seq ranges, inclusive
    schema_versions: list[int]
    replay_of: Optional[str] = None    # set on a replay session: the session it re-executed
    chain: Optional[dict] = None       # EventStore.verify_chain's answer, when it was asked for

    @property
    def gap_free(self) -> bool:
        return not self.seq_gaps

    @property
    def schema_mismatch(self) -> bool:
        return any(v != SCHEMA_VERSION for v in self.schema_versions)

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
            out.append(f"schema_version {self.schema_versions} recorded; this code speaks {SCHEMA_VERSION}")
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
def load_session(store: Store, session_id: str, *, check_chain: bool = False) -> Session:
    """One indexed query for the whole session, then one pass in memory; the hash chain (a second
    read) only when asked."""
    with _gc_paused():
        events = store.events.read(session_id)
        if not events:
            if check_chain and store.events.heads.get(session_id) is not None:
                # every event deleted: the session is gone from the log, not from its chain head
                return Session(session_id, 0, [], None, None, [], [], chain=store.events.verify_chain(session_id))
            gone = store.admin_log.deletion_line(session_id)  # a deleted session says when, by whom, what it was
            raise SessionNotFound(f"unknown session '{session_id}'" + (f": {gone}" if gone else ""))
        session = build_session(session_id, events)
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


def build_session(session_id: str, events: list[dict]) -> Session:
    cycles: dict[str, Cycle] = {}
    # pairing tables: a response finds its request by run_id (unique per LLM / tool invocation)
    open_llm: dict[str, LlmCall] = {}
    open_tool: dict[str, ToolCall] = {}
    versions: set[int] = set()
    replay_of = None
    for ev in events:
        seq, kind, state, p = ev["seq"], ev["kind"], ev.get("state") or "RUNNER", ev.get("payload") or {}
        versions.add(int(ev.get("schema_version", SCHEMA_VERSION)))
        cid = ev["cycle_id"]
        c = cycles.get(cid)
        if c is None:
            c = cycles[cid] = Cycle(cycle_id=cid, index=len(cycles) + 1, first_seq=seq, last_seq=seq)
        c.last_seq, c.events = seq, c.events + 1
        rid = ev.get("run_id")
        if kind == "transition":
            c.transitions.append({"seq": seq, "from": p.get("from"), "to": p.get("to")})
            if p.get("to") == "END":
                c.ended = True
            elif p.get("to") and p.get("to") not in c.states:
                c.states.append(p["to"])
        elif kind == "contract":
            c.contracts[state] = {"name": p.get("name"), "data": p.get("data"), "seq": seq}
        elif kind == "llm_request":
            call = LlmCall(seq=seq, state=state, run_id=rid, model=p.get("model"), messages=p.get("messages") or [],
                           tools=p.get("tools") or [], structured_output=p.get("structured_output"))
            c.llm_calls.append(call)
            if rid:
                open_llm[rid] = call
        elif kind == "llm_response":
            call = open_llm.pop(rid, None) if rid else None
            if call is None:  # a response without its request: keep it visible rather than drop it
                call = LlmCall(seq=seq, state=state, run_id=rid, model=p.get("model"), messages=[], tools=[],
                               structured_output=None)
                c.llm_calls.append(call)
            call.response_seq, call.answered = seq, True
            call.text, call.tool_calls = p.get("text"), p.get("tool_calls") or []
            call.usage, call.latency_ms, call.error = p.get("usage") or {}, p.get("latency_ms"), p.get("error")
            call.invalid_tool_calls, call.finish_reason = p.get("invalid_tool_calls") or [], p.get("finish_reason")
            for k in c.tokens:
                c.tokens[k] += int(call.usage.get(k, 0) or 0)
        elif kind == "tool_call":
            t = ToolCall(seq=seq, state=state, run_id=rid, name=p.get("name", "?"), args=p.get("args"))
            c.tool_calls.append(t)
            if rid:
                open_tool[rid] = t
        elif kind == "tool_result":
            t = open_tool.pop(rid, None) if rid else None
            if t is None:
                t = ToolCall(seq=seq, state=state, run_id=rid, name=p.get("name", "?"), args=None)
                c.tool_calls.append(t)
            t.answered, t.result, t.error, t.latency_ms = True, p.get("result"), p.get("error"), p.get("latency_ms")
        elif kind == "manifest":
            c.manifest, c.inputs = p, p.get("inputs")
        elif kind == "validation":
            c.validations.append({"seq": seq, "state": state, **p})
            if p.get("check") == "human_approval":
                c.approval = {"approved": bool(p.get("ok")), "by": p.get("by")}
            if state == REPLAY_STATE and p.get("replay_of"):
                replay_of = p["replay_of"]
        elif kind == "error":
            c.errors.append({"seq": seq, "state": state, **p})
        elif kind == "retrieval":
            c.retrievals.append({"seq": seq, "state": state, **p})
    for c in cycles.values():
        execution = (c.contracts.get("EXECUTING") or {}).get("data") or {}
        scan = (c.contracts.get("SCANNING") or {}).get("data") or {}
        # positions closed on their levels at the scan come first, as they did
        exits = [{"symbol": e["symbol"], "side": "SELL", "quantity": e["quantity"], "price": e["exit_price"],
                  "fees": None, "date": e["closed"], "reason": e["reason"]} for e in scan.get("exits") or []]
        c.trades = exits + list((execution.get("result") or {}).get("executed_trades") or [])
        c.status = _status(c)
    return Session(session_id=session_id, events=len(events), cycles=list(cycles.values()),
                   first_ts=events[0].get("ts"), last_ts=events[-1].get("ts"),
                   seq_gaps=_gaps([e["seq"] for e in events]), schema_versions=sorted(versions), replay_of=replay_of)


def last_cycle_facts(session_id: str, events: list[dict]) -> dict[str, Any]:
    """What a session summary (database/sessions.py) shows of its last cycle, read from that cycle's events the
    way replay reads them: its status, symbols and as-of; and the session a replay session replays."""
    session = build_session(session_id, events)
    cycle = session.cycles[-1]
    inputs = cycle.inputs or {}
    return {"status": cycle.status, "symbols": inputs.get("symbols") or [], "as_of": inputs.get("as_of"),
            "replay_of": session.replay_of}


use_cycle_reader(last_cycle_facts)


def _status(c: Cycle) -> str:
    if not c.ended:
        validation = (c.contracts.get("VALIDATING") or {}).get("data") or {}
        if ((c.inputs or {}).get("approval_required") and c.approval is None and validation.get("passed")
                and c.states[-1:] == ["VALIDATING"]):
            return "pending_approval"  # the runner stops there until `tradegraph approve`
        return "cut_off"
    memory = (c.contracts.get("MEMORIZING") or {}).get("data") or {}
    if memory.get("status"):
        return memory["status"]
    analysis = (c.contracts.get("ANALYZING") or {}).get("data") or {}
    if analysis.get("degraded"):
        return "degraded"
    failed = any(e.get("state") in STATES or e.get("state") == "RUNNER" for e in c.errors
                 if e.get("type") not in NON_FATAL_ERRORS)
    if failed and "EXECUTING" in c.contracts:
        return "executed_with_errors"
    return "failed" if failed else "completed"


# error events a cycle records and goes on from (a vote lost, a tool call refused and the model told)
NON_FATAL_ERRORS = ("analyst_failed", "quant_failed", "rebuttal_fallback", "tool_refused", "invalid_tool_call",
                    "tool_steps_exhausted", "llm_cache_error")


def fatal_error(c: Cycle) -> Optional[dict]:
    """How the recorded cycle failed: {state, type, message} of its last fatal error event, or None."""
    fatal = [e for e in c.errors if e.get("type") not in NON_FATAL_ERRORS]
    if not fatal:
        return None
    e = fatal[-1]
    return {"state": e.get("state"), "type": e.get("type"), "message": e.get("message")}


# ---------------------------------------------------------------------------- verify
_MISSING = "<missing>"


@dataclass
class Divergence:
    cycle_id: str
    state: str
    path: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        return (f"cycle {self.cycle_id}, state {self.state}, field {self.path or '<contract>'}: "
                f"recorded {_short(self.recorded)} != replayed {_short(self.replayed)}")


@dataclass
class CycleVerdict:
    cycle_id: str
    compared_states: list[str]
    divergences: list[Divergence]
    notes: list[str] = field(default_factory=list)
    skipped: bool = False
    # every way today's configuration, prompts, tool schemas, packages or data differ from the manifest
    config_differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.divergences


@dataclass
class VerifyReport:
    session_id: str
    replay_session_id: str
    cycles: list[CycleVerdict]
    warnings: list[str]
    chain: Optional[dict] = None  # the recording's hash chain (EventStore.verify_chain)

    @property
    def identical(self) -> bool:
        """The replayed contracts (and failures) equal the recorded ones."""
        return all(c.identical for c in self.cycles)

    @property
    def ok(self) -> bool:
        """Identical AND the recording is intact: a tampered log is never vouched for."""
        return self.identical and (self.chain is None or bool(self.chain["ok"]))

    @property
    def first_divergence(self) -> Optional[Divergence]:
        for c in self.cycles:
            if c.divergences:
                return c.divergences[0]
        return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["identical"], d["ok"] = self.identical, self.ok
        return d


def _short(v: Any, limit: int = 160) -> str:
    import json

    text = v if v == _MISSING else json.dumps(v, default=str, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def first_diff(recorded: Any, replayed: Any, path: str = "") -> Optional[tuple[str, Any, Any]]:
    """Depth-first, in field order: the first (path, recorded, replayed) that differs, or None."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for k in list(recorded) + [k for k in replayed if k not in recorded]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in recorded:
                return sub, _MISSING, replayed[k]
            if k not in replayed:
                return sub, recorded[k], _MISSING
            d = first_diff(recorded[k], replayed[k], sub)
            if d:
                return d
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for i, (a, b) in enumerate(zip(recorded, replayed)):
            d = first_diff(a, b, f"{path}[{i}]")
            if d:
                return d
        if len(recorded) != len(replayed):
            i = min(len(recorded), len(replayed))
            return (f"{path}[{i}]", recorded[i] if i < len(recorded) else _MISSING,
                    replayed[i] if i < len(replayed) else _MISSING)
        return None
    # bool is an int in Python: True == 1 must still count as a difference
    if recorded != replayed or isinstance(recorded, bool) != isinstance(replayed, bool):
        return path, recorded, replayed
    return None


JSON_INSTRUCTION = "Reply with only a JSON object"  # agent/passes.py json_instruction's opening


def inferred_pass_protocol(calls: list[LlmCall]) -> Optional[int]:
    """The pass protocol a cycle's requests were made under. Protocol 4 sent its own system prompt. Protocol 3 is the
    only earlier one whose PLANNING offered none of the registered tools (it asks for the Plan at once; a Plan asked
    as a function call offers the contract as its one tool). Before it, a structured pass (its JSON instruction,
    whatever the method) that followed tool results tells: protocol 1 asked the model again after them (an answer
    without tool calls stands before the JSON instruction), protocol 2 did not (the tool results do). None when
    neither shows (no PLANNING request, no structured pass after a tool)."""
    from agent.prompts import BASE_SYSTEM
    from agent.tools import REGISTRY

    if any(m.get("type") == "system" and m.get("content") == BASE_SYSTEM for call in calls for m in call.messages[:1]):
        return 4  # protocol 4's system prompt (agent/prompts.py): no earlier protocol sent it
    planning = [call for call in calls if call.state == "PLANNING"]
    if planning and not any(name in REGISTRY for call in planning for name in call.tools):
        return 3
    for call in calls:
        messages = call.messages
        at = next((i for i, m in enumerate(messages) if m.get("type") == "human"
                   and str(m.get("content") or "").startswith(JSON_INSTRUCTION)), None)
        if not at or not any(m.get("type") == "tool" for m in messages[:at]):
            continue
        before = messages[at - 1]
        if before.get("type") == "tool":
            return 2
        if before.get("type") == "ai" and not before.get("tool_calls"):
            return 1
    return None


def _replay_session_id(store: Store, session_id: str) -> str:
    n = 1
    while store.events.exists(f"replay-{session_id}-{n}"):
        n += 1
    return f"replay-{session_id}-{n}"


def verify_session(store: Store, session_id: str, *, config=None) -> VerifyReport:
    """Re-execute every recorded cycle from the recording alone; never writes into `session_id`."""
    from graph.manifest import build_manifest
    from graph.runtime import default_runtime

    session = load_session(store, session_id, check_chain=True)
    if not session.cycles:  # the whole log deleted, its chain head left: nothing to re-execute, nothing vouched for
        return VerifyReport(session_id, "(none: no recorded event)", [], session.warnings(), chain=session.chain)
    if session.schema_mismatch:
        raise SchemaVersionMismatch(
            f"session '{session_id}' was recorded with schema_version {session.schema_versions}, but this code "
            f"speaks schema_version {SCHEMA_VERSION}: its contracts can't be replayed or compared")
    replay_id = _replay_session_id(store, session_id)
    today = build_manifest(default_runtime())
    # the link to the source, written first (seq 1) so a replay session always says what it replays
    store.events.append([_replay_event(replay_id, session.cycles[0].cycle_id, {
        "check": "replay_of", "ok": True, "replay_of": session_id, "cycles": [c.cycle_id for c in session.cycles]})])
    verdicts = []
    try:
        for cycle in session.cycles:
            v = _verify_cycle(store, session_id, replay_id, cycle, today, config)
            verdicts.append(v)
            first = v.divergences[0] if v.divergences else None
            store.events.append([_replay_event(replay_id, cycle.cycle_id, {
                "check": "replay_verify", "ok": first is None, "replay_of": session_id,
                "compared_states": v.compared_states, "notes": v.notes, "config_differences": v.config_differences,
                "first_divergence": None if first is None else
                {"state": first.state, "path": first.path, "recorded": _short(first.recorded),
                 "replayed": _short(first.replayed)}})])
    finally:
        store.sessions.fold(replay_id)  # its own writers, not Store.writer()'s: its summary is brought up here
    return VerifyReport(session_id, replay_id, verdicts, session.warnings(), chain=session.chain)


def _replay_event(replay_id: str, cycle_id: str, payload: dict) -> dict:
    return {"event_id": uuid.uuid4().hex, "session_id": replay_id, "cycle_id": cycle_id, "ts": time.time(),
            "state": REPLAY_STATE, "kind": "validation", "schema_version": SCHEMA_VERSION, "run_id": None,
            "parent_run_id": None, "payload": payload}


def _verify_cycle(store: Store, session_id: str, replay_id: str, cycle: Cycle, today: dict, config) -> CycleVerdict:
    from agent.config import AgentConfig
    from agent.passes import PASS_PROTOCOL, PASS_PROTOCOL_KEY, PASS_PROTOCOLS
    from database.writer import BufferedEventWriter
    from graph.audit import AuditHandler
    from graph.manifest import (PROTOCOLS, config_from_manifest, manifest_differences, recorded_pass_protocol,
                                recorded_sources)
    from graph.replay.model import (RecordedRecall, RecordedResponses, ReplayChatModel, ReplayExecution,
                                    recorded_bundles, tier_models)
    from graph.runner import compiled_graph, cycle_run_config
    from graph.runtime import CycleContext, default_runtime
    from graph.state import CONTRACT_KEYS

    scan = (cycle.contracts.get("SCANNING") or {}).get("data")
    if scan is None:
        return CycleVerdict(cycle.cycle_id, [], [], ["no SCANNING contract recorded: nothing to re-execute"],
                            skipped=True)
    quick, deep = tier_models(cycle, config)
    notes: list[str] = []
    differences: list[str] = []
    sources: dict[str, Any] = {}
    if cycle.manifest is not None:  # re-execute with what the cycle ran with, and say where today differs
        settings = config or replace(config_from_manifest(cycle.manifest), quick_model=quick, deep_model=deep)
        # the data is the recorded files, checked against their hashes, not whatever today's defaults are
        current, data_lines = {k: v for k, v in today.items() if k != "data"}, []
        if "data" in cycle.manifest:
            current["data"] = cycle.manifest["data"]
            sources, data_lines = recorded_sources(cycle.manifest["data"] or {})
        differences = manifest_differences(cycle.manifest, current) + data_lines
    else:
        settings = config or AgentConfig.from_env(quick_model=quick, deep_model=deep)
        notes.append("no manifest recorded (an older session): re-executed with today's configuration")
    responses = RecordedResponses(cycle.llm_calls)
    models = {"quick": ReplayChatModel(model_name=quick, responses=responses),
              "deep": ReplayChatModel(model_name=deep, responses=responses)}
    execution = (cycle.contracts.get("EXECUTING") or {}).get("data")
    rt = default_runtime(settings, execution=ReplayExecution(execution), model_factory=lambda _cfg, tier: models[tier],
                         bundle_source=recorded_bundles(scan), recorded_scan=scan, recorded_approval=cycle.approval,
                         recorded_recall=(recall := RecordedRecall(cycle.retrievals)), **sources)
    # the recorded inputs (a backtest's Case included), the same cycle_id and the ORIGINAL session id in the
    # state (prompts and contracts see exactly what they saw); only the audit handler writes, to replay_id
    recorded_inputs = cycle.inputs or {"symbols": list(scan["universe"]), "as_of": scan["as_of"],
                                       "approval_required": cycle.approval is not None}
    inputs = {"portfolio": scan["portfolio"], **recorded_inputs, "session_id": session_id,
              "cycle_id": cycle.cycle_id}
    graph = compiled_graph()
    if inputs.get("approval_required") and cycle.approval is None:
        # the recording paused for a human who has not decided: the replay pauses at the same gate
        from langgraph.checkpoint.memory import InMemorySaver

        from graph.builder import build_graph

        graph = build_graph(checkpointer=InMemorySaver())
    writer = BufferedEventWriter(store.events)  # continuous, as a cycle's (database/writer.py)
    handler = AuditHandler(writer, replay_id, cycle.cycle_id)
    run_config = cycle_run_config(rt, thread_id=f"{replay_id}:{cycle.cycle_id}", handler=handler, writer=None,
                                  run_name="tradegraph-replay", session_id=session_id,
                                  metadata={"session_id": replay_id, "cycle_id": cycle.cycle_id,
                                            "replay_of": session_id})
    # the recorded pass protocol, not today's: a request the recording never made has no answer to replay. A cycle
    # without a manifest (from before manifests, or a Studio run) says it through its requests
    inferred = inferred_pass_protocol(cycle.llm_calls)
    protocol = recorded_pass_protocol(cycle.manifest) if cycle.manifest is not None else (inferred or PASS_PROTOCOL)
    run_config["configurable"][PASS_PROTOCOL_KEY] = protocol
    if inferred is not None and inferred != protocol:
        notes.append(f"the manifest says pass protocol {protocol}, but the recorded requests read as protocol "
                     f"{inferred}")
    if protocol not in PASS_PROTOCOLS:
        notes.append(f"recorded under pass protocol {protocol!r}, which this code does not speak "
                     f"({', '.join(map(str, PASS_PROTOCOLS))}): the replay cannot ask what the recording asked")
    elif protocol != PASS_PROTOCOL:
        older = " (the recording predates protocol versions)" if PROTOCOLS not in (cycle.manifest or {}) else ""
        notes.append(f"replayed under pass protocol {protocol}{older}, as recorded; new cycles run protocol "
                     f"{PASS_PROTOCOL}")
    if cycle.manifest is not None:  # the replay ran with the recorded manifest: its own log says so first
        writer.put({"event_id": uuid.uuid4().hex, "session_id": replay_id, "cycle_id": cycle.cycle_id,
                    "ts": time.time(), "state": "RUNNER", "kind": "manifest", "schema_version": SCHEMA_VERSION,
                    "payload": cycle.manifest, "run_id": None, "parent_run_id": None})
    try:
        final = graph.invoke(inputs, run_config, context=CycleContext(rt))
        failure = final.get("error")
    except Exception as e:  # noqa: BLE001 - a crash is a divergence, reported like one
        final, failure = {}, {"state": "RUNNER", "type": type(e).__name__, "message": str(e)}
        notes.append(f"replay raised {type(e).__name__}: {e}")
    finally:
        writer.close()
    replayed = {s: final[k] for s, k in CONTRACT_KEYS.items() if final.get(k) is not None}
    divergences = []
    # a backtest decided this cycle's point again in a later cycle (the store went away under it, or its process
    # stopped): what it recorded is compared, not how it ended, which the fault decided (graph/backtest/loop.py)
    superseded = next((e for e in cycle.errors if e.get("type") == "cycle_superseded"), None)
    ended = cycle.ended and superseded is None
    # a cut-off (or paused, or superseded) recording is compared only as far as it goes
    states = [s for s in STATES if s in cycle.contracts or (ended and s in replayed)]
    for s in states:
        d = first_diff((cycle.contracts.get(s) or {}).get("data", _MISSING), replayed.get(s, _MISSING))
        if d:
            divergences.append(Divergence(cycle.cycle_id, s, *d))
    recorded_failure = fatal_error(cycle)
    if ended and (recorded_failure or failure):  # the same contracts, failed another way, still diverged
        d = first_diff({k: (recorded_failure or {}).get(k, _MISSING) for k in ("state", "type", "message")},
                       {k: (failure or {}).get(k, _MISSING) for k in ("state", "type", "message")}, "error")
        if d:
            where = (recorded_failure or failure or {}).get("state") or "RUNNER"
            divergences.append(Divergence(cycle.cycle_id, where, *d))
    if superseded is not None:
        notes.append(f"recorded cycle is superseded (decision point {superseded.get('decision_point_idx')} was "
                     f"decided again in a later cycle): compared its {len(states)} recorded state(s), not how it "
                     f"ended")
    elif cycle.paused:
        notes.append("recorded cycle is waiting for human approval: the replay paused at the same gate")
    elif cycle.cut_off:
        notes.append(f"recorded cycle is cut off: compared {len(states)} recorded state(s) only")
    notes += [f"replay asked an unrecorded LLM request in {m}" for m in responses.misses]
    notes += [f"recalled notes re-used for a different query: {m}" for m in recall.misses]
    if responses.unused:
        notes.append(f"{responses.unused} recorded LLM response(s) were not asked for by the replay")
    return CycleVerdict(cycle.cycle_id, states, divergences, notes, config_differences=differences)
