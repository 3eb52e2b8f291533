"""A cycle's audit events as OpenTelemetry spans that follow the GenAI semantic conventions.

One trace per cycle:

    invoke_agent tradegraph      the cycle: session, cycle id, status, symbols, as-of, tokens
      SCANNING, PLANNING, …      one span per state entered, from its transition to its last event
        chat {model}             one per LLM attempt (llm_request → llm_response), failed ones included
        execute_tool {tool}      one per tool call (tool_call → tool_result)

Validations, dividends paid, positions exited, abstentions, approvals decided, retrievals and recorded errors
become span events on their state's span; a fatal error, a failed attempt or a failed tool call sets `error.type`
and status ERROR on its span.

The spans are built, not recorded: their times are the events' own timestamps, and every id derives
from the session, cycle and event ids, so exporting a cycle twice gives the same trace and a backend
keeps one copy.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Optional

from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
)
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME, SERVICE_VERSION
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from graph.machine.recording import NON_FATAL_ERRORS, Cycle, fatal_error, fold, read_events
from schemas.events import (
    AbstainedEvent,
    AnyEvent,
    ApprovalDecidedEvent,
    ContractEvent,
    DividendPaidEvent,
    ErrorEvent,
    LlmRequestEvent,
    LlmRequestPayload,
    LlmResponseEvent,
    LlmResponsePayload,
    PositionExitedEvent,
    RetrievalEvent,
    TelemetryEvent,
    ToolCallEvent,
    ToolResultEvent,
    TransitionEvent,
    ValidationEvent,
)

AGENT = "tradegraph"
INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
EXECUTE_TOOL = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
STATE = "state"  # a state's span is no GenAI operation: this names its kind in reports
SPAN_KINDS = (INVOKE_AGENT, STATE, CHAT, EXECUTE_TOOL)

# tradegraph's provider names where the conventions' well-known value differs; others pass as they are
_PROVIDERS = {
    "google": gen_ai.GenAiProviderNameValues.GCP_GEMINI.value,
    "gemini": gen_ai.GenAiProviderNameValues.GCP_GEMINI.value,
    "mistral": gen_ai.GenAiProviderNameValues.MISTRAL_AI.value,
}
# an event about the export itself (live.py), not about the run: never a span (TelemetryEvent)
_FAILED_CYCLE = ("failed", "executed_with_errors", "cut_off")
# the conventions' fallback when no better class of error is known
_OTHER = "_OTHER"

SCOPE = InstrumentationScope("tradegraph.telemetry")


def provider_name(provider: Optional[str]) -> Optional[str]:
    return _PROVIDERS.get(provider, provider) if provider else None


def trace_id_of(session_id: str, cycle_id: str) -> int:
    return _id(16, "trace", session_id, cycle_id)


def _id(nbytes: int, *parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:nbytes], "big") or 1  # an all-zero id is invalid in OTLP


def _ns(ts: float) -> int:
    # whole microseconds: the same float gives the same integer on every export
    return round(float(ts) * 1_000_000) * 1000


def _type_of(error: str) -> str:
    """`ValueError: bad` → `ValueError`: the audit stores errors as 'Type: message'."""
    head = str(error).split(":", 1)[0].strip()
    return head if head and " " not in head else _OTHER


def _first_line(text: Any, limit: int = 500) -> str:
    return (str(text).strip().splitlines() or [""])[0][:limit]


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """OTel attribute values are never None; lists must be of one primitive type."""
    out = {}
    for k, v in attributes.items():
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = [str(x) for x in v]
        elif not isinstance(v, (str, bool, int, float)):
            v = str(v)
        out[k] = v
    return out


def default_resource() -> Resource:
    """service.name `tradegraph` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise."""
    return _resource(os.environ.get("OTEL_SERVICE_NAME"), os.environ.get("OTEL_RESOURCE_ATTRIBUTES"))


@functools.lru_cache(maxsize=8)
def _resource(_service_name: Optional[str], _attributes: Optional[str]) -> Resource:
    # once per process and setting: the package lookup costs ~8 ms, and service.instance.id (random per
    # Resource.create) then names this process, as the conventions mean it to
    try:
        ours = version("tradegraph")
    except PackageNotFoundError:
        ours = "unknown"
    return Resource.create({SERVICE_NAME: AGENT, SERVICE_VERSION: ours}).merge(OTELResourceDetector().detect())


@dataclass
class _Draft:
    """A span while the events are walked: its end grows with every event of its own."""

    name: str
    span_id: int
    parent_id: Optional[int]
    start_ns: int
    end_ns: int
    kind: SpanKind = SpanKind.INTERNAL
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    error: Optional[str] = None  # the status description; set means status ERROR

    def fail(self, error_type: str, description: str) -> None:
        self.attributes[ERROR_TYPE] = error_type
        self.error = description or error_type


def session_spans(
    session_id: str, events: list[dict], *, cycle_id: Optional[str] = None, resource: Optional[Resource] = None
) -> list[ReadableSpan]:
    """The spans of every cycle of a session's events (seq order, as EventStore.read returns them), or of one. The
    events are read once through parse_event and folded once (graph/machine/recording.py fold): the spans are drawn
    from that fold's cycles and the typed events it read."""
    typed = [e for e in read_events(events) if not isinstance(e, TelemetryEvent)]
    session = fold(session_id, typed, []) if typed else None
    by_cycle: dict[str, list[AnyEvent]] = {}
    for e in typed:
        by_cycle.setdefault(e.cycle_id, []).append(e)
    resource = resource or default_resource()
    spans: list[ReadableSpan] = []
    for c in session.cycles if session else []:
        if cycle_id is None or c.cycle_id == cycle_id:
            spans += cycle_spans(session_id, c, by_cycle[c.cycle_id], resource)
    return spans


def cycle_spans(session_id: str, cycle: Cycle, events: list[AnyEvent], resource: Resource) -> list[ReadableSpan]:
    manifest = cycle.manifest or {}
    config = manifest.get("config") or {}
    provider = provider_name(config.get("provider"))
    server = manifest.get("model_endpoint_host")
    times = [_ns(e.ts) for e in events]
    root = _Draft(
        f"{INVOKE_AGENT} {AGENT}",
        _id(8, "cycle", session_id, cycle.cycle_id),
        None,
        min(times),
        max(times),
        attributes=_root_attributes(session_id, cycle, provider, config),
    )
    drafts = [root]
    states: dict[str, _Draft] = {}  # the latest entry of each state: where its events go
    waiting: dict[str, _Draft] = {}  # run_id -> a chat or tool span waiting for its answer
    asked: list[dict] = []  # tool calls the models asked for, not yet matched to a run
    for ev in events:
        state, ns, rid = ev.state or "RUNNER", _ns(ev.ts), ev.run_id
        if isinstance(ev, TransitionEvent) and ev.payload.to and ev.payload.to != "END":
            to = ev.payload.to
            states[to] = _Draft(
                to, _id(8, "state", ev.event_id), root.span_id, ns, ns, attributes={"tradegraph.state": to}
            )
            drafts.append(states[to])
        home = states.get(state, root)
        home.end_ns = max(home.end_ns, ns)
        match ev:
            case LlmRequestEvent(payload=q):
                drafts.append(_chat(ev, q.model, ns, home, provider, server, q))
                if rid:
                    waiting[rid] = drafts[-1]
            case LlmResponseEvent(payload=r):
                span = waiting.pop(rid, None) if rid else None
                if span is None:  # an answer whose request is not on the record: still an attempt, still billed
                    span = _chat(ev, r.model, ns - round((r.latency_ms or 0) * 1e6), home, provider, server, None)
                    drafts.append(span)
                _answer(span, r, ns)
                asked += r.tool_calls
            case ToolCallEvent(payload=tc):
                drafts.append(_tool(ev, tc.name or "?", ns, home, _claim(asked, tc.name, tc.args)))
                if rid:
                    waiting[rid] = drafts[-1]
            case ToolResultEvent(payload=tr):
                span = waiting.pop(rid, None) if rid else None
                if span is None:
                    span = _tool(ev, tr.name or "?", ns - round((tr.latency_ms or 0) * 1e6), home, None)
                    drafts.append(span)
                span.end_ns = ns
                if tr.error:
                    span.fail(_type_of(tr.error), _first_line(tr.error))
            case ContractEvent(payload=k):
                home.attributes["tradegraph.contract"] = k.name
            case ValidationEvent(payload=v):
                home.events.append(
                    Event(
                        "tradegraph.validation",
                        _clean(
                            {
                                "tradegraph.schema": v.schema_,
                                "tradegraph.check": v.check,
                                "tradegraph.ok": v.ok,
                                "tradegraph.attempt": (v.model_extra or {}).get("attempt"),
                                "tradegraph.error": _first_line(v.error) if v.error else None,
                            }
                        ),
                        timestamp=ns,
                    )
                )
            case DividendPaidEvent(payload=d):
                home.events.append(
                    Event(
                        "tradegraph.dividend_paid",
                        _clean({"tradegraph.symbol": d.symbol, "tradegraph.amount": d.amount}),
                        timestamp=ns,
                    )
                )
            case PositionExitedEvent(payload=x):
                home.events.append(
                    Event(
                        "tradegraph.position_exited",
                        _clean(
                            {
                                "tradegraph.symbol": x.symbol,
                                "tradegraph.exit_reason": x.reason,
                                "tradegraph.realized_pnl": x.realized_pnl,
                            }
                        ),
                        timestamp=ns,
                    )
                )
            case AbstainedEvent(payload=n):
                home.events.append(
                    Event(
                        "tradegraph.abstained",
                        _clean({"tradegraph.symbol": n.symbol, "tradegraph.agent": n.analyst}),
                        timestamp=ns,
                    )
                )
            case ApprovalDecidedEvent(payload=a):
                home.events.append(
                    Event(
                        "tradegraph.approval_decided",
                        _clean({"tradegraph.approved": a.approved, "tradegraph.by": a.by}),
                        timestamp=ns,
                    )
                )
            case RetrievalEvent(payload=h):
                home.events.append(
                    Event(
                        "tradegraph.retrieval",
                        _clean(
                            {"tradegraph.agent": h.agent, "tradegraph.symbol": h.symbol, "tradegraph.hits": len(h.hits)}
                        ),
                        timestamp=ns,
                    )
                )
            case ErrorEvent(payload=e):
                home.events.append(
                    Event(
                        "exception",
                        _clean(
                            {
                                EXCEPTION_TYPE: e.type,
                                EXCEPTION_MESSAGE: e.message,
                                EXCEPTION_STACKTRACE: (e.model_extra or {}).get("traceback"),
                            }
                        ),
                        timestamp=ns,
                    )
                )
                if e.type not in NON_FATAL_ERRORS:
                    home.fail(e.type or _OTHER, _first_line(e.message))
    for span in waiting.values():  # asked, never answered: the log was cut off while it was in flight
        span.end_ns = root.end_ns
        span.fail(_OTHER, "no answer on the record: the cycle's log ends while this call was in flight")
    _close_root(root, cycle)
    return _finish(drafts, trace_id_of(session_id, cycle.cycle_id), resource)


def _root_attributes(session_id: str, cycle: Cycle, provider: Optional[str], config: dict) -> dict[str, Any]:
    inputs = cycle.inputs or {}
    return {
        gen_ai.GEN_AI_OPERATION_NAME: INVOKE_AGENT,
        gen_ai.GEN_AI_AGENT_NAME: AGENT,
        gen_ai.GEN_AI_PROVIDER_NAME: provider,
        gen_ai.GEN_AI_REQUEST_MODEL: config.get("quick_model"),
        gen_ai.GEN_AI_CONVERSATION_ID: session_id,
        SESSION_ID: session_id,
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: cycle.tokens.get("input_tokens", 0),
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: cycle.tokens.get("output_tokens", 0),
        "tradegraph.session_id": session_id,
        "tradegraph.cycle_id": cycle.cycle_id,
        "tradegraph.cycle.status": cycle.status,
        "tradegraph.symbols": inputs.get("symbols"),
        "tradegraph.as_of": inputs.get("as_of"),
        "tradegraph.llm.attempts": len(cycle.llm_calls),
        "tradegraph.version": ((cycle.manifest or {}).get("versions") or {}).get("tradegraph"),
    }


def _close_root(root: _Draft, cycle: Cycle) -> None:
    if cycle.status not in _FAILED_CYCLE:
        return
    fatal = fatal_error(cycle)
    if fatal is not None:
        root.fail(fatal["type"] or _OTHER, f"{fatal['state']}: {_first_line(fatal['message'])}")
    else:  # cut off: the log stops before END, with no error recorded
        root.fail(_OTHER, f"cycle {cycle.status}: its log ends in {cycle.states[-1] if cycle.states else 'RUNNER'}")


def _chat(
    ev: AnyEvent,
    model: Optional[str],
    ns: int,
    parent: _Draft,
    provider: Optional[str],
    server: Optional[str],
    request: Optional[LlmRequestPayload],
) -> _Draft:
    # an answer without its request does not say what output was asked for
    output = None if request is None else "json" if request.structured_output else "text"
    return _Draft(
        f"{CHAT} {model}" if model else CHAT,
        _id(8, "span", ev.event_id),
        parent.span_id,
        ns,
        ns,
        SpanKind.CLIENT,
        {
            gen_ai.GEN_AI_OPERATION_NAME: CHAT,
            gen_ai.GEN_AI_PROVIDER_NAME: provider,
            gen_ai.GEN_AI_REQUEST_MODEL: model,
            SERVER_ADDRESS: server,
            gen_ai.GEN_AI_OUTPUT_TYPE: output,
            "tradegraph.llm.attempt": request.attempt if request else None,
            "tradegraph.llm.structured_output": request.structured_output if request else None,
            "tradegraph.run_id": ev.run_id,
        },
    )


def _answer(span: _Draft, r: LlmResponsePayload, ns: int) -> None:
    # an attempt that failed with no answer was billed nothing and reported no usage: its span claims none (the
    # audit counts it as zero tokens for the cycle's spend)
    silent = bool(r.error) and r.text is None
    span.end_ns = ns
    span.attributes.update(
        {
            gen_ai.GEN_AI_RESPONSE_MODEL: r.model,
            gen_ai.GEN_AI_USAGE_INPUT_TOKENS: None if silent else r.usage.input_tokens,
            gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: None if silent else r.usage.output_tokens,
            gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: [r.finish_reason] if r.finish_reason else None,
            HTTP_RESPONSE_STATUS_CODE: r.http_status,
            "tradegraph.llm.retryable": r.retryable,
            "tradegraph.llm.retry_in_s": r.retry_in_s,
        }
    )
    if r.error:
        span.fail(r.error_type or _type_of(r.error), _first_line(r.error))


def _tool(ev: AnyEvent, name: str, ns: int, parent: _Draft, call_id: Optional[str]) -> _Draft:
    return _Draft(
        f"{EXECUTE_TOOL} {name}",
        _id(8, "span", ev.event_id),
        parent.span_id,
        ns,
        ns,
        SpanKind.INTERNAL,
        {
            gen_ai.GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
            gen_ai.GEN_AI_TOOL_CALL_ID: call_id,
            "tradegraph.run_id": ev.run_id,
        },
    )


def _claim(asked: list[dict], name: Optional[str], args: Any) -> Optional[str]:
    """The id the model gave this call: the audit's tool_call carries the run, not the model's call id, so it
    is matched on name and arguments. A call no model asked for (a state's own) has none."""
    for i, call in enumerate(asked):
        if call.get("name") == name and call.get("args") == args:
            return asked.pop(i).get("id")
    return None


def _finish(drafts: list[_Draft], trace_id: int, resource: Resource) -> list[ReadableSpan]:
    by_id = {d.span_id: d for d in drafts}
    for d in reversed(drafts):  # children come after their parent: a parent ends no earlier than its children
        if d.parent_id is not None:
            parent = by_id[d.parent_id]
            parent.end_ns = max(parent.end_ns, d.end_ns)
    flags = TraceFlags(TraceFlags.SAMPLED)
    return [
        ReadableSpan(
            name=d.name,
            context=SpanContext(trace_id, d.span_id, is_remote=False, trace_flags=flags),
            parent=SpanContext(trace_id, d.parent_id, is_remote=False, trace_flags=flags) if d.parent_id else None,
            resource=resource,
            attributes=_clean(d.attributes),
            events=d.events,
            kind=d.kind,
            status=Status(StatusCode.ERROR, d.error) if d.error is not None else Status(StatusCode.UNSET),
            start_time=d.start_ns,
            end_time=d.end_ns,
            instrumentation_scope=SCOPE,
        )
        for d in drafts
    ]


def kind_of(attributes: dict[str, Any]) -> str:
    """A span's kind in reports: its GenAI operation, or `state`."""
    return attributes.get(gen_ai.GEN_AI_OPERATION_NAME) or STATE
