"""Verify a session by re-executing it (reading it back is graph/machine/recording.py's `load_session_log`).

`verify_session` re-runs each recorded cycle through the real graph from the recording alone: the
manifest's configuration and inputs (a backtest's Case, approval_required), every LLM answer, feature
bundle and execution result, and the human approval decision (graph/services/replay/model.py); under a new
session `replay-<orig>-<n>`. It compares the contracts state by state, the way a failed cycle failed and the
status each cycle's `cycle_ended` recorded, lists every way today's configuration differs from the manifest, and
checks the hash chain. Every event is read through `parse_event` first (schemas/events.py): an event of an unknown
kind or a payload that is not its kind's leaves the session unverified, named by seq, kind and field. An answer
the recording took from the response cache is compared with the recorded answer it cites (`cached_from`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

from database.connection import Store
from graph.machine.errors import SessionNotFound
from graph.machine.recording import (  # noqa: F401
    NON_FATAL_ERRORS,
    REPLAY_STATE,
    Cycle,
    LlmCall,
    SchemaVersionMismatch,
    SessionLog,
    ToolCall,
    build_session_log,
    fatal_error,
    fold,
    load_session_log,
)
from schemas.base import SCHEMA_VERSION
from schemas.events import AnyEvent, EventParseError, LlmResponseEvent, new_event, parse_all, parse_event
from schemas.states import STATES

__all__ = [
    "SessionNotFound",
    "SessionLog",
    "Cycle",
    "LlmCall",
    "ToolCall",
    "load_session_log",
    "build_session_log",
    "read_session",
    "RecordingUnreadable",
    "unreadable_events",
    "Divergence",
    "CycleVerdict",
    "VerifyReport",
    "SchemaVersionMismatch",
    "verify_session",
    "first_diff",
]

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
        return (
            f"cycle {self.cycle_id}, state {self.state}, field {self.path or '<contract>'}: "
            f"recorded {_short(self.recorded)} != replayed {_short(self.replayed)}"
        )


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
    # events parse_event refuses, one line each (seq, kind, first bad field): nothing was re-executed
    unreadable: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """The replayed contracts (and failures, and statuses) equal the recorded ones."""
        return all(c.identical for c in self.cycles)

    @property
    def ok(self) -> bool:
        """Identical AND every event readable AND the recording intact: a tampered log is never vouched for."""
        return self.identical and not self.unreadable and (self.chain is None or bool(self.chain["ok"]))

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
            return (
                f"{path}[{i}]",
                recorded[i] if i < len(recorded) else _MISSING,
                replayed[i] if i < len(replayed) else _MISSING,
            )
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
    from agent.tools import TOOLS

    if any(m.get("type") == "system" and m.get("content") == BASE_SYSTEM for call in calls for m in call.messages[:1]):
        return 4  # protocol 4's system prompt (agent/prompts.py): no earlier protocol sent it
    planning = [call for call in calls if call.state == "PLANNING"]
    if planning and not any(name in TOOLS for call in planning for name in call.tools):
        return 3
    for call in calls:
        messages = call.messages
        at = next(
            (
                i
                for i, m in enumerate(messages)
                if m.get("type") == "human" and str(m.get("content") or "").startswith(JSON_INSTRUCTION)
            ),
            None,
        )
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
    from graph.machine.cycle_context import default_services
    from graph.machine.manifest import build_manifest

    events = store.events.read(session_id)
    if not events:  # unknown (SessionNotFound), or the whole log deleted with its chain head left
        session = load_session_log(store, session_id, check_chain=True)
        return VerifyReport(session_id, "(none: no recorded event)", [], session.warnings(), chain=session.chain)
    versions = sorted({e.get("schema_version", SCHEMA_VERSION) for e in events}, key=str)
    unknown = [v for v in versions if not readable_version(v)]
    if unknown:  # before reading them: a version this code has no upcasters to (or from) is a conflict
        raise SchemaVersionMismatch(
            f"session '{session_id}' was recorded with schema_version {versions}, but this code reads schema_version "
            f"1..{SCHEMA_VERSION}: its contracts can't be replayed or compared"
        )
    chain = store.events.verify_chain(session_id)
    # every event read once, typed (an older version lifted through the upcasters): what is re-executed and
    # compared is the recording as today's code reads it
    typed, unreadable = parse_all(events)
    if unreadable:  # read as events this code does not know, nothing can be re-executed or compared
        warnings = (
            []
            if chain["ok"]
            else [f"hash chain broken at seq {chain['first_broken']['seq']}: {chain['first_broken']['reason']}"]
        )
        return VerifyReport(
            session_id, "(none: the recording cannot be read)", [], warnings, chain=chain, unreadable=unreadable
        )
    session = fold(session_id, typed, [int(v) for v in versions])
    session.chain = chain
    cited = _cited_answers(store, typed)
    replay_id = _replay_session_id(store, session_id)
    today = build_manifest(default_services())
    # the link to the source, written first (seq 1) so a replay session always says what it replays
    store.events.append(
        [
            _replay_event(
                replay_id,
                session.cycles[0].cycle_id,
                {
                    "check": "replay_of",
                    "ok": True,
                    "replay_of": session_id,
                    "cycles": [c.cycle_id for c in session.cycles],
                },
            )
        ]
    )
    verdicts = []
    try:
        for cycle in session.cycles:
            v = _verify_cycle(store, session_id, replay_id, cycle, today, config)
            v.divergences += cited.get(cycle.cycle_id, [])
            verdicts.append(v)
            first = v.divergences[0] if v.divergences else None
            store.events.append(
                [
                    _replay_event(
                        replay_id,
                        cycle.cycle_id,
                        {
                            "check": "replay_verify",
                            "ok": first is None,
                            "replay_of": session_id,
                            "compared_states": v.compared_states,
                            "notes": v.notes,
                            "config_differences": v.config_differences,
                            "first_divergence": None
                            if first is None
                            else {
                                "state": first.state,
                                "path": first.path,
                                "recorded": _short(first.recorded),
                                "replayed": _short(first.replayed),
                            },
                        },
                    )
                ]
            )
    finally:
        store.sessions.fold(replay_id)  # its own writers, not Store.writer()'s: its summary is brought up here
    return VerifyReport(session_id, replay_id, verdicts, session.warnings(), chain=session.chain)


class RecordingUnreadable(ValueError):
    """A recording whose events are not events this code knows: the message is parse_event's line for the first."""


def read_session(store: Store, session_id: str) -> SessionLog:
    """load_session_log with its hash chain, for the tables, JSON and HTML: a recording that cannot be rebuilt because an
    event is not what its kind says (a doctored usage, a contract that is a string) fails with parse_event's one line
    naming that event, never the reconstruction's own exception."""
    try:
        return load_session_log(store, session_id, check_chain=True)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        if isinstance(e, SchemaVersionMismatch):
            raise
        lines = unreadable_events(store.events.read(session_id))
        if not lines:
            raise
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        # an event edited in place fails its hash chain too: that is said first, as --check-chain would
        chain = store.events.verify_chain(session_id)
        broken = (
            ""
            if chain["ok"]
            else (f"hash chain broken at seq {chain['first_broken']['seq']}: {chain['first_broken']['reason']}; ")
        )
        raise RecordingUnreadable(broken + lines[0] + more) from None


def unreadable_events(events: list[dict]) -> list[str]:
    """Each stored event parse_event refuses, as its one-line reason (seq, kind, first bad field)."""
    return parse_all(events)[1]


def readable_version(version: Any) -> bool:
    """A schema_version parse_event reads: today's, or an older one the upcasters lift."""
    return isinstance(version, int) and 1 <= version <= SCHEMA_VERSION


def _cited_answers(store: Store, events: list[AnyEvent]) -> dict[str, list[Divergence]]:
    """Per cycle, each answer the recording took from the response cache that is not the recorded answer it cites
    (`cached_from`: the llm_response event the cache entry named): the cited event gone, in a session whose hash
    chain is broken (a source re-hashed to its end fails there, against its signed head under a key), edited, not a
    provider's answer, or an answer that differs. The replay answers from the recording itself, so this is the only place a cached
    answer is held to its source."""
    from agent.cache import recorded_answer
    from database.events import event_hash

    out: dict[str, list[Divergence]] = {}
    chains: dict[str, dict] = {}  # each cited session's hash chain (head and key included), checked once
    for ev in events:
        if not isinstance(ev, LlmResponseEvent) or not ev.payload.cached_from:
            continue
        p, cited_id = ev.payload, ev.payload.cached_from
        answered = recorded_answer(p.text, p.tool_calls, p.invalid_tool_calls)
        source = store.events.by_event_id(cited_id)
        problem: Optional[str] = None
        recorded: Any = _MISSING
        if source is None:
            problem = "the cited llm_response is not in the store"
        elif not _chain_of(store, chains, source["session_id"])["ok"]:
            broken = chains[source["session_id"]]["first_broken"]
            problem = (
                f"the cited event's session {source['session_id']} fails its hash chain at seq "
                f"{broken['seq']}: {broken['reason']}"
            )
        elif event_hash(source) != source.get("hash"):  # the stored document itself, as hashed
            problem = (
                f"the cited event (seq {source.get('seq')} of {source.get('session_id')}) was edited after it "
                f"was written"
            )
        else:
            try:
                typed: Optional[AnyEvent] = parse_event(source)
            except EventParseError:
                typed = None
            if not isinstance(typed, LlmResponseEvent) or typed.payload.cached:
                problem = (
                    f"the cited event (seq {source.get('seq')} of {source.get('session_id')}) is no provider answer"
                )
            else:
                r = typed.payload
                recorded = recorded_answer(r.text, r.tool_calls, r.invalid_tool_calls)
                if recorded != answered:
                    problem = "the cached answer differs from the answer it cites"
        if problem is not None:
            out.setdefault(ev.cycle_id, []).append(
                Divergence(
                    ev.cycle_id,
                    ev.state or "RUNNER",
                    f"seq {ev.seq} cached_from {cited_id} ({problem})",
                    recorded,
                    answered,
                )
            )
    return out


def _chain_of(store: Store, chains: dict[str, dict], session_id: str) -> dict:
    if session_id not in chains:
        chains[session_id] = store.events.verify_chain(session_id)
    return chains[session_id]


def _replay_event(replay_id: str, cycle_id: str, payload: dict) -> dict:
    return new_event(replay_id, cycle_id, REPLAY_STATE, "validation", payload)


def _verify_cycle(store: Store, session_id: str, replay_id: str, cycle: Cycle, today: dict, config) -> CycleVerdict:
    from agent.config import AgentConfig
    from agent.passes import PASS_PROTOCOL, PASS_PROTOCOLS
    from database.writer import BufferedEventWriter
    from graph.machine.audit import AuditHandler
    from graph.machine.cycle_context import default_services
    from graph.machine.manifest import (
        PROTOCOLS,
        config_from_manifest,
        manifest_differences,
        recorded_pass_protocol,
        recorded_sources,
    )
    from graph.machine.runner import compiled_graph, cycle_run_config
    from graph.machine.state import CONTRACT_KEYS
    from graph.services.replay.model import (
        RecordedRecall,
        RecordedResponses,
        ReplayChatModel,
        ReplayExecution,
        recorded_bundles,
        tier_models,
    )

    scan = (cycle.contracts.get("SCANNING") or {}).get("data")
    if scan is None:
        return CycleVerdict(
            cycle.cycle_id, [], [], ["no SCANNING contract recorded: nothing to re-execute"], skipped=True
        )
    quick, deep = tier_models(cycle, config)
    notes: list[str] = []
    differences: list[str] = []
    sources: dict[str, Any] = {}
    if cycle.manifest is not None:  # re-execute with what the cycle ran with, and say where today differs
        settings = config or replace(config_from_manifest(cycle.manifest), quick_model=quick, deep_model=deep)
        # the data is the recorded files, checked against their hashes, not whatever today's defaults are
        current = {k: v for k, v in today.items() if k != "data"}
        data_lines: list[str] = []
        if "data" in cycle.manifest:
            current["data"] = cycle.manifest["data"]
            sources, data_lines = recorded_sources(cycle.manifest["data"] or {})
        differences = manifest_differences(cycle.manifest, current) + data_lines
    else:
        settings = config or AgentConfig.from_env(quick_model=quick, deep_model=deep)
        notes.append("no manifest recorded (an older session): re-executed with today's configuration")
    responses = RecordedResponses(cycle.llm_calls)
    models = {
        "quick": ReplayChatModel(model_name=quick, responses=responses),
        "deep": ReplayChatModel(model_name=deep, responses=responses),
    }
    execution = (cycle.contracts.get("EXECUTING") or {}).get("data")
    rt = default_services(
        settings,
        execution=ReplayExecution(execution),
        model_factory=lambda _cfg, tier: models[tier],
        bundle_source=recorded_bundles(scan),
        recorded_scan=scan,
        recorded_approval=cycle.approval,
        recorded_recall=(recall := RecordedRecall(cycle.retrievals)),
        **sources,
    )
    # the recorded inputs (a backtest's Case included), the same cycle_id and the ORIGINAL session id in the
    # state (prompts and contracts see exactly what they saw); only the audit handler writes, to replay_id
    recorded_inputs = cycle.inputs or {
        "symbols": list(scan["universe"]),
        "as_of": scan["as_of"],
        "approval_required": cycle.approval is not None,
    }
    inputs = {"portfolio": scan["portfolio"], **recorded_inputs, "session_id": session_id, "cycle_id": cycle.cycle_id}
    graph = compiled_graph()
    if inputs.get("approval_required") and cycle.approval is None:
        # the recording paused for a human who has not decided: the replay pauses at the same gate
        from langgraph.checkpoint.memory import InMemorySaver

        from graph.machine.builder import build_graph

        graph = build_graph(checkpointer=InMemorySaver())
    writer = BufferedEventWriter(store.events)  # continuous, as a cycle's (database/writer.py)
    handler = AuditHandler(writer, replay_id, cycle.cycle_id)
    run_config, context = cycle_run_config(
        rt,
        thread_id=f"{replay_id}:{cycle.cycle_id}",
        handler=handler,
        writer=None,
        run_name="tradegraph-replay",
        session_id=session_id,
        metadata={"session_id": replay_id, "cycle_id": cycle.cycle_id, "replay_of": session_id},
    )
    # the recorded pass protocol, not today's: a request the recording never made has no answer to replay. A cycle
    # without a manifest (from before manifests, or a Studio run) says it through its requests
    inferred = inferred_pass_protocol(cycle.llm_calls)
    protocol = recorded_pass_protocol(cycle.manifest) if cycle.manifest is not None else (inferred or PASS_PROTOCOL)
    rt.protocol = protocol
    # protocol 5 changed only the schema sent (json_schema's response format, json_mode's stated schema): requests
    # made under it read as protocol 4's
    if inferred is not None and inferred != protocol and not (inferred == 4 and protocol == 5):
        notes.append(
            f"the manifest says pass protocol {protocol}, but the recorded requests read as protocol {inferred}"
        )
    if protocol not in PASS_PROTOCOLS:
        notes.append(
            f"recorded under pass protocol {protocol!r}, which this code does not speak "
            f"({', '.join(map(str, PASS_PROTOCOLS))}): the replay cannot ask what the recording asked"
        )
    elif protocol != PASS_PROTOCOL:
        older = " (the recording predates protocol versions)" if PROTOCOLS not in (cycle.manifest or {}) else ""
        notes.append(
            f"replayed under pass protocol {protocol}{older}, as recorded; new cycles run protocol {PASS_PROTOCOL}"
        )
    if cycle.manifest is not None:  # the replay ran with the recorded manifest: its own log says so first
        # ... less the recording's signing mark: the replay session's heads are signed as this process signs them
        from database.heads import MARK, signing_mark

        copied = {k: v for k, v in cycle.manifest.items() if k != MARK}
        if (mark := signing_mark()) is not None:
            copied[MARK] = mark
        writer.put(new_event(replay_id, cycle.cycle_id, "RUNNER", "manifest", copied))
    try:
        final = graph.invoke(inputs, run_config, context=context)
        failure = final.get("error")
    except Exception as e:  # noqa: BLE001 - a crash is a divergence, reported like one
        final, failure = {}, {"state": "RUNNER", "type": type(e).__name__, "message": str(e)}
        notes.append(f"replay raised {type(e).__name__}: {e}")
    finally:
        writer.close()
    replayed = {s: final[k] for s, k in CONTRACT_KEYS.items() if final.get(k) is not None}
    divergences = []
    # a backtest decided this cycle's point again in a later cycle (the store went away under it, or its process
    # stopped): what it recorded is compared, not how it ended, which the fault decided (graph/services/backtest/loop.py)
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
        d = first_diff(
            {k: (recorded_failure or {}).get(k, _MISSING) for k in ("state", "type", "message")},
            {k: (failure or {}).get(k, _MISSING) for k in ("state", "type", "message")},
            "error",
        )
        if d:
            where = (recorded_failure or failure or {}).get("state") or "RUNNER"
            divergences.append(Divergence(cycle.cycle_id, where, *d))
    if ended and cycle.recorded_status is not None:  # how the runner said it ended, against how it ends now
        replayed_status = _replayed_status(final, failure, cycle.recorded_status)
        if replayed_status != cycle.recorded_status:
            divergences.append(
                Divergence(cycle.cycle_id, "RUNNER", "cycle_ended.status", cycle.recorded_status, replayed_status)
            )
    if superseded is not None:
        notes.append(
            f"recorded cycle is superseded (decision point {superseded.get('decision_point_idx')} was "
            f"decided again in a later cycle): compared its {len(states)} recorded state(s), not how it "
            f"ended"
        )
    elif cycle.paused:
        notes.append("recorded cycle is waiting for human approval: the replay paused at the same gate")
    elif cycle.cut_off:
        notes.append(f"recorded cycle is cut off: compared {len(states)} recorded state(s) only")
    notes += [f"replay asked an unrecorded LLM request in {m}" for m in responses.misses]
    notes += [f"recalled notes re-used for a different query: {m}" for m in recall.misses]
    if responses.unused:
        notes.append(f"{responses.unused} recorded LLM response(s) were not asked for by the replay")
    return CycleVerdict(cycle.cycle_id, states, divergences, notes, config_differences=differences)


def _replayed_status(final: dict, failure: Optional[dict], recorded: str) -> str:
    """The status the runner would have recorded for the replayed cycle (graph/machine/runner.py _invoke): paused, or
    the graph's own status. A crash out of the graph ends failed or executed_with_errors, which the runner reads from
    the execution ledger, not the graph: a replay that crashed matches either (how it crashed is compared as the
    cycle's error)."""
    if final.get("__interrupt__"):
        return "pending_approval"
    if not final and failure is not None:
        return recorded if recorded in ("failed", "executed_with_errors") else "failed (the replay raised)"
    return final.get("status") or "completed"
