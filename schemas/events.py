"""The `state_events` audit log's contract: the envelope every event shares, a payload model per kind, the one
factory every writer builds an event with, and `parse_event`, which reads a stored document back into its typed
event (lifting an older payload through the upcasters first).

Writing stays plain: `new_event` returns the document as it is stored, and nothing validates a payload on the write
path (a 4-symbol cycle writes ~200 events; the audit is already most of a cycle's cost, bench/bench_cycle.py). The
envelope is checked by the store on append (`StateEvent`), the payloads where they are read back (`parse_event`) and
in tests (tests/unit/test_event_model.py, tests/unit/test_recorded_sessions.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, TypeAdapter, ValidationError

from schemas.base import SCHEMA_VERSION, Contract, CycleStatus, ExitReason

# the kinds live in schemas/event_kinds.py, which builds no model: what only names a kind (the kernel's read_events
# input) loads none of the event classes below
from schemas.event_kinds import EVENT_KINDS, PACK_REF, SPLIT_FROM, EventKind

# no control character in an id: the embedded store's SQLite reads a string up to a NUL, so `a\x00b` was session
# `a` to its queries (two sessions' events merged, and appends to both raced without end)
_ID = r"^[^\x00-\x1f\x7f]+$"


class Envelope(Contract):
    """What every event carries beside its kind and payload."""

    event_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    session_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    cycle_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    seq: int = Field(ge=1)
    ts: float = Field(gt=0)
    state: str = Field(max_length=50)
    schema_version: int = SCHEMA_VERSION
    run_id: Optional[str] = None
    parent_run_id: Optional[str] = None
    # tamper evidence, set by the store on append: sha256 of the previous event of the session, and of this one
    prev_hash: Optional[str] = Field(default=None, max_length=64)
    hash: Optional[str] = Field(default=None, max_length=64)


class StateEvent(Envelope):
    """The envelope as the store checks it on append (database/events.py): the payload is any JSON object."""

    kind: EventKind
    payload: dict[str, Any]


def new_event(
    session_id: str,
    cycle_id: str,
    state: str,
    kind: EventKind,
    payload: dict[str, Any],
    *,
    run_id: Optional[str] = None,
    parent_run_id: Optional[str] = None,
    event_id: Optional[str] = None,
) -> dict[str, Any]:
    """The one place an event document is made: the plain dict the writer stores (the store adds seq and hashes).
    The payload must already be plain JSON data; it is not validated here (see the module's note)."""
    return {
        "event_id": event_id or uuid.uuid4().hex,
        "session_id": session_id,
        "cycle_id": cycle_id,
        "ts": time.time(),
        "state": state,
        "kind": kind,
        "payload": payload,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "parent_run_id": parent_run_id,
    }


# ---------------------------------------------------------------------------- payloads, one per kind
class Payload(BaseModel):
    """A closed payload: a field this model does not name is a doctored or unknown event, refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OpenPayload(Payload):
    """The kinds many places write, each with its own details (the check's symbol, the error's tool): the fields
    every reader relies on are typed, the rest are kept as recorded."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


JsonObject = dict[str, Any]


class ManifestPayload(OpenPayload):  # graph/machine/manifest.py build_manifest; older manifests lack later keys
    config: JsonObject
    market_profile: Optional[JsonObject] = None
    models: Optional[JsonObject] = None
    model_endpoint_host: Optional[str] = None
    prompts: Optional[JsonObject] = None
    protocols: Optional[JsonObject] = None
    tools: Optional[JsonObject] = None
    allow_lists: Optional[JsonObject] = None
    versions: Optional[JsonObject] = None
    data: Optional[JsonObject] = None
    inputs: Optional[JsonObject] = None
    broker: Optional[JsonObject] = None  # a broker cycle's broker, host and mandate (graph/machine/broker/)


class TransitionPayload(Payload):  # graph/machine/nodes/common.py: `to` END closes the cycle's graph run
    from_: str = Field(alias="from")
    to: str


class LlmRequestPayload(Payload):  # graph/machine/audit.py on_chat_model_start
    messages: list[JsonObject]
    model: Optional[str] = None
    tools: list[str] = []
    structured_output: Optional[str] = None
    attempt: int = Field(1, ge=1)


class Usage(OpenPayload):
    """A call's usage as recorded (agent/pricing.py usage_of; a provider's own detail fields kept as they came): the
    counts readers add up are whole numbers. Not bounded here: a provider that reported nonsense is recorded as it
    reported (agent/budget.py refuses to believe it and the cycle audits that), never rewritten."""

    input_tokens: Optional[StrictInt] = None
    output_tokens: Optional[StrictInt] = None
    total_tokens: Optional[StrictInt] = None
    cached_tokens: Optional[StrictInt] = None
    reasoning_tokens: Optional[StrictInt] = None
    estimated: Optional[StrictBool] = None


class LlmResponsePayload(Payload):  # graph/machine/audit.py on_llm_end (an answer) and on_llm_error (a failure)
    text: Any = None
    tool_calls: list[JsonObject] = []
    invalid_tool_calls: list[JsonObject] = []
    usage: Usage = Usage()
    cost_usd: Optional[float] = None
    priced_as: Optional[str] = None
    model: Optional[str] = None
    finish_reason: Optional[str] = None
    http_status: Optional[int] = None
    latency_ms: Optional[float] = None
    error: Optional[str] = None
    cached: bool = False
    cached_from: Optional[str] = None
    # a failed attempt only (agent/llm.py describe_failure, next_wait)
    error_type: Optional[str] = None
    retryable: Optional[bool] = None
    retry_after_s: Optional[float] = None
    retry_in_s: Optional[float] = None


class ToolCallPayload(Payload):
    name: str
    args: Any = None


class ToolResultPayload(Payload):
    name: str
    result: Any = None
    error: Optional[str] = None
    latency_ms: Optional[float] = None


class ContractPayload(Payload):  # the state's contract (schemas/), dumped in JSON mode
    name: str
    data: JsonObject


class ValidationPayload(OpenPayload):  # schema repairs, the risk engine, a refused approval, a replay's verdicts
    ok: bool
    schema_: Optional[str] = Field(None, alias="schema")
    check: Optional[str] = None
    error: Optional[str] = None
    replay_of: Optional[str] = None  # a replay's verdicts: the session replayed (graph/services/replay/session.py)


class DividendPaidPayload(Payload):  # schemas/portfolio.py DividendCredit, as credited
    symbol: str
    date: str  # the ex-date
    per_share: float
    quantity: float
    amount: float


class PositionExitedPayload(Payload):  # schemas/memory.py ClosedTrade, as closed on its level
    symbol: str
    reason: ExitReason
    date: str
    price: float
    realized_pnl: float


class AbstainedPayload(Payload):
    symbol: str
    analyst: str
    reason: str


class ApprovalDecidedPayload(Payload):
    approved: bool
    by: str
    comment: Optional[str] = None  # only when the human gave one


class ErrorPayload(
    OpenPayload
):  # `type` names it; graph/machine/recording.py NON_FATAL_ERRORS lists the ones a cycle survives
    type: str
    message: Optional[str] = None
    state: Optional[str] = None


class RetrievalPayload(Payload):  # agent/memory/recall.py: the past notes one agent was given
    agent: str
    symbol: str
    query: str
    filter: JsonObject
    hits: list[JsonObject]


class TelemetryPayload(Payload):  # graph/services/telemetry/live.py
    exporter: str
    endpoint: Optional[str] = None
    ok: bool
    skipped: bool
    type: Optional[str] = None
    error: Optional[str] = None


class IdempotencyPayload(Payload):  # graph/kernel/idempotent.py
    key: str
    use: str
    capability: str
    transport: str
    status: Optional[str] = None
    fingerprint: Optional[str] = None
    first_fingerprint: Optional[str] = None
    first_at: Optional[str] = None


class CycleEndedPayload(Payload):
    """The status the runner returned (and the CLI printed) for a cycle that ended; a cycle paused for approval
    has none until it is resumed and ends."""

    status: CycleStatus


class OrderIntentPayload(Payload):
    client_order_id: str
    symbol: str
    side: str
    quantity: float
    leg: int
    broker: str
    resumed: bool = False  # an earlier attempt left this intent: the broker is asked for it before any submit


class OrderAckPayload(Payload):
    client_order_id: str
    broker_order_id: str
    status: str
    filled_quantity: float = 0.0
    avg_price: Optional[float] = None
    found_existing: bool = False  # the broker already had it (a lost answer, a killed process): not sent again
    retries: list[str] = []


class OrderUpdatePayload(Payload):
    client_order_id: str
    broker_order_id: Optional[str] = None
    symbol: str
    status: str
    filled_quantity: float = 0.0
    avg_price: Optional[float] = None
    reason: Optional[str] = None
    late: bool = False  # seen by a reconciliation after the cycle ended


class ReconciliationPayload(Payload):
    broker: str
    orders: int
    updated: list[JsonObject] = []
    drift: list[JsonObject] = []
    clean: bool


class BrokerControlPayload(Payload):
    action: Literal["halt", "resume"]
    by: str
    reason: str = ""
    cancelled: list[str] = []


PAYLOADS: dict[str, type[Payload]] = {
    "manifest": ManifestPayload,
    "transition": TransitionPayload,
    "llm_request": LlmRequestPayload,
    "llm_response": LlmResponsePayload,
    "tool_call": ToolCallPayload,
    "tool_result": ToolResultPayload,
    "contract": ContractPayload,
    "validation": ValidationPayload,
    "error": ErrorPayload,
    "retrieval": RetrievalPayload,
    "telemetry": TelemetryPayload,
    "idempotency": IdempotencyPayload,
    "cycle_ended": CycleEndedPayload,
    "order_intent": OrderIntentPayload,
    "order_ack": OrderAckPayload,
    "order_update": OrderUpdatePayload,
    "reconciliation": ReconciliationPayload,
    "broker_control": BrokerControlPayload,
    "dividend_paid": DividendPaidPayload,
    "position_exited": PositionExitedPayload,
    "abstained": AbstainedPayload,
    "approval_decided": ApprovalDecidedPayload,
}
assert set(PAYLOADS) == set(EVENT_KINDS), "every kind has exactly one payload model"


class Event(Envelope):
    """A stored event read back and typed: the envelope, seq and hashes included, and its payload's model. Each kind
    has its own class below (`kind: Literal[...]`, its payload's model), so `match` and `isinstance` narrow."""

    kind: EventKind
    payload: Payload


class ManifestEvent(Event):
    kind: Literal["manifest"]
    payload: ManifestPayload


class TransitionEvent(Event):
    kind: Literal["transition"]
    payload: TransitionPayload


class LlmRequestEvent(Event):
    kind: Literal["llm_request"]
    payload: LlmRequestPayload


class LlmResponseEvent(Event):
    kind: Literal["llm_response"]
    payload: LlmResponsePayload


class ToolCallEvent(Event):
    kind: Literal["tool_call"]
    payload: ToolCallPayload


class ToolResultEvent(Event):
    kind: Literal["tool_result"]
    payload: ToolResultPayload


class ContractEvent(Event):
    kind: Literal["contract"]
    payload: ContractPayload


class ValidationEvent(Event):
    kind: Literal["validation"]
    payload: ValidationPayload


class DividendPaidEvent(Event):
    kind: Literal["dividend_paid"]
    payload: DividendPaidPayload


class PositionExitedEvent(Event):
    kind: Literal["position_exited"]
    payload: PositionExitedPayload


class AbstainedEvent(Event):
    kind: Literal["abstained"]
    payload: AbstainedPayload


class ApprovalDecidedEvent(Event):
    kind: Literal["approval_decided"]
    payload: ApprovalDecidedPayload


class ErrorEvent(Event):
    kind: Literal["error"]
    payload: ErrorPayload


class RetrievalEvent(Event):
    kind: Literal["retrieval"]
    payload: RetrievalPayload


class TelemetryEvent(Event):
    kind: Literal["telemetry"]
    payload: TelemetryPayload


class IdempotencyEvent(Event):
    kind: Literal["idempotency"]
    payload: IdempotencyPayload


class CycleEndedEvent(Event):
    kind: Literal["cycle_ended"]
    payload: CycleEndedPayload


class OrderIntentEvent(Event):
    kind: Literal["order_intent"]
    payload: OrderIntentPayload


class OrderAckEvent(Event):
    kind: Literal["order_ack"]
    payload: OrderAckPayload


class OrderUpdateEvent(Event):
    kind: Literal["order_update"]
    payload: OrderUpdatePayload


class ReconciliationEvent(Event):
    kind: Literal["reconciliation"]
    payload: ReconciliationPayload


class BrokerControlEvent(Event):
    kind: Literal["broker_control"]
    payload: BrokerControlPayload


AnyEvent = Annotated[
    Union[
        ManifestEvent,
        TransitionEvent,
        LlmRequestEvent,
        LlmResponseEvent,
        ToolCallEvent,
        ToolResultEvent,
        ContractEvent,
        ValidationEvent,
        ErrorEvent,
        RetrievalEvent,
        TelemetryEvent,
        IdempotencyEvent,
        CycleEndedEvent,
        OrderIntentEvent,
        OrderAckEvent,
        OrderUpdateEvent,
        ReconciliationEvent,
        BrokerControlEvent,
        DividendPaidEvent,
        PositionExitedEvent,
        AbstainedEvent,
        ApprovalDecidedEvent,
    ],
    Field(discriminator="kind"),
]
EVENTS: dict[str, type[Event]] = {
    "manifest": ManifestEvent,
    "transition": TransitionEvent,
    "llm_request": LlmRequestEvent,
    "llm_response": LlmResponseEvent,
    "tool_call": ToolCallEvent,
    "tool_result": ToolResultEvent,
    "contract": ContractEvent,
    "validation": ValidationEvent,
    "error": ErrorEvent,
    "retrieval": RetrievalEvent,
    "telemetry": TelemetryEvent,
    "idempotency": IdempotencyEvent,
    "cycle_ended": CycleEndedEvent,
    "order_intent": OrderIntentEvent,
    "order_ack": OrderAckEvent,
    "order_update": OrderUpdateEvent,
    "reconciliation": ReconciliationEvent,
    "broker_control": BrokerControlEvent,
    "dividend_paid": DividendPaidEvent,
    "position_exited": PositionExitedEvent,
    "abstained": AbstainedEvent,
    "approval_decided": ApprovalDecidedEvent,
}
assert set(EVENTS) == set(EVENT_KINDS), "every kind has exactly one event class"
_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)

# ---------------------------------------------------------------------------- versions
# (kind, version) -> a function lifting a payload of that version to version + 1, as the eventsourcing library's
# upcasters do. A change to a payload's shape bumps SCHEMA_VERSION (schemas/base.py) and registers one here for
# each kind it changes; a kind without one at some version kept its shape across that step.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}
# (kind, version) -> a function taking an event of that kind and version to version + 1 under the kind it is now
# (the same one, or another), with that kind's payload: a kind that said several things is split this way. Only
# what is read is moved (parse_event's copy); the stored document, and the hash chain over it, keep the old kind.
KindUpcaster = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]
KIND_UPCASTERS: dict[tuple[str, int], KindUpcaster] = {}


def upcaster(kind: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(fn: Upcaster) -> Upcaster:
        _free(kind, from_version)
        UPCASTERS[(kind, from_version)] = fn
        return fn

    return register


def kind_upcaster(kind: str, from_version: int) -> Callable[[KindUpcaster], KindUpcaster]:
    def register(fn: KindUpcaster) -> KindUpcaster:
        _free(kind, from_version)
        if kind not in SPLIT_FROM:  # `events --kind` finds a moved event by it (graph/kernel read_events)
            raise ValueError(
                f"declare the kinds a stored {kind} event may be read as: schemas/event_kinds.py SPLIT_FROM"
            )
        KIND_UPCASTERS[(kind, from_version)] = fn
        return fn

    return register


def _free(kind: str, from_version: int) -> None:
    if kind not in PAYLOADS:
        raise ValueError(f"upcaster for unknown event kind {kind!r}")
    if (kind, from_version) in UPCASTERS or (kind, from_version) in KIND_UPCASTERS:
        raise ValueError(f"two upcasters for {kind} events of schema_version {from_version}")


def upcast(kind: str, version: int, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The event's kind and payload as this code's SCHEMA_VERSION writes them; a copy is lifted, never the stored
    document."""
    for v in range(version, SCHEMA_VERSION):
        move = KIND_UPCASTERS.get((kind, v))
        lift = UPCASTERS.get((kind, v))
        if move is not None:
            kind, payload = move(dict(payload))
        elif lift is not None:
            payload = lift(dict(payload))
    return kind, payload


# version 2: dividends, exits, abstentions and human approvals were `validation` events, told apart by `check`
_V1_VALIDATION_FIELDS = ("schema", "check", "ok")


@kind_upcaster("validation", 1)
def _split_validation(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    check = payload.get("check")
    rest = {k: v for k, v in payload.items() if k not in _V1_VALIDATION_FIELDS}
    if check == "dividend" and payload.get("schema") == "DividendCredit":
        return "dividend_paid", rest
    if isinstance(check, str) and check.startswith("exit_") and payload.get("schema") == "ClosedTrade":
        return "position_exited", {**rest, "reason": check.removeprefix("exit_")}
    if check == "abstention" and payload.get("schema") == "AnalystNote":
        return "abstained", rest
    if check == "human_approval":
        return "approval_decided", {**rest, "approved": payload.get("ok")}
    return "validation", payload


def read_kind(doc: dict[str, Any]) -> str:
    """The kind a stored document is read as (an older `validation` may be a dividend, an exit, ...); a kind
    this code does not know is its stored one (parse_event says what is wrong with it)."""
    kind, version = doc.get("kind"), doc.get("schema_version", SCHEMA_VERSION)
    if kind not in PAYLOADS or not isinstance(version, int) or not isinstance(doc.get("payload"), dict):
        return str(kind)
    return upcast(kind, version, doc["payload"])[0]


# version 3: a later use of an idempotency key is a `repeat` ("replay" now means only a session's re-execution)
@upcaster("idempotency", 2)
def _repeat_not_replay(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "use": "repeat"} if payload.get("use") == "replay" else payload


# ---------------------------------------------------------------------------- the read side
class EventParseError(ValueError):
    """A stored document that is no event this code knows: an unknown kind, a version from the future, a payload
    that does not fit its kind's model. The message names the event, its kind and the first bad field."""


def parse_event(doc: dict[str, Any]) -> AnyEvent:
    """A stored `state_events` document as its typed event, upcast to SCHEMA_VERSION first (its payload, and its
    kind where a version split one): the event as today's writers would write it. Its hashes are the stored
    document's (the chain is checked on what is stored, database/events.py verify_chain)."""
    kind = doc.get("kind")
    if kind not in PAYLOADS:
        raise EventParseError(f"{_where(doc)}: unknown event kind {kind!r} (this code knows {', '.join(EVENT_KINDS)})")
    version = doc.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise EventParseError(
            f"{_where(doc)}: {kind} event of schema_version {version!r}; this code reads 1..{SCHEMA_VERSION}"
        )
    held = doc.get("payload")
    if isinstance(held, dict) and PACK_REF in held:  # no payload: the store's reference to one it could not read
        raise EventParseError(
            f"{_where(doc)}: its {kind} payload cannot be read: the pack holding it ({_short(held[PACK_REF])}) "
            f"is missing or was edited"
        )
    if version == SCHEMA_VERSION and "_id" not in doc:
        body = doc  # today's event as stored: validated as it is (pydantic copies, never mutates, its input)
    else:
        body = {k: v for k, v in doc.items() if k != "_id"}
        if isinstance(body.get("payload"), dict):
            body["kind"], body["payload"] = upcast(kind, version, body["payload"])
        body["schema_version"] = SCHEMA_VERSION
    try:
        return _ADAPTER.validate_python(body)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"][1:])  # the first part is the union's tag (the kind)
        read_as = body.get("kind")
        stored = "" if read_as == kind else f" (stored as a {kind} event of schema_version {version})"
        raise EventParseError(
            f"{_where(doc)}: bad {read_as} event{stored}: {loc or '<event>'}: {err['msg']} "
            f"(got {_short(err.get('input'))})"
        ) from None


def parse_all(docs: list[dict[str, Any]]) -> tuple[list[AnyEvent], list[str]]:
    """The events parse_event reads, and the one-line reason for each it refuses (a reader that must not vouch for
    what it could not read names them; replay's verify and the look-ahead audit)."""
    typed: list[AnyEvent] = []
    refused: list[str] = []
    for doc in docs:
        try:
            typed.append(parse_event(doc))
        except EventParseError as e:
            refused.append(str(e))
    return typed, refused


def _where(doc: dict[str, Any]) -> str:
    return f"event seq {doc.get('seq', '?')} of session {doc.get('session_id', '?')!r}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
