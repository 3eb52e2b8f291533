"""The kinds of `state_events` an event may have (schemas/events.py has a payload model for each). Here alone, with
no model built, so that what only names a kind (the kernel's `read_events` input, `tradegraph events --kind`) loads
none of the event classes: `tradegraph sessions` answers without them (issue 29)."""

from __future__ import annotations

from typing import Literal, get_args

EventKind = Literal[
    "manifest",  # a cycle's effective configuration and inputs, its first event (graph/machine/manifest.py)
    "transition",
    "llm_request",
    "llm_response",
    "tool_call",
    "tool_result",
    "contract",
    "validation",  # a check that passed or not: a schema, the risk engine, a mandate, a broker's precheck, a replay
    # what happened to the book or the decision, each its own kind since schema_version 2 (version 1 wrote them as
    # `validation` events; parse_event moves them, schemas/events.py KIND_UPCASTERS)
    "dividend_paid",  # a dividend credited at the scan (graph/machine/market_source.py)
    "position_exited",  # a position closed on its stop, target or horizon at the scan (same)
    "abstained",  # an analyst with no evidence of its kind said nothing (agent/analysts.py)
    "approval_decided",  # a human approved or rejected the paused decision (graph/machine/nodes/executing.py)
    "error",
    "retrieval",
    "telemetry",  # a failed or skipped OpenTelemetry export (graph/services/telemetry/live.py)
    "idempotency",  # a use of an idempotency key: the first answer, a repeat, a refusal (graph/kernel/idempotent.py)
    "cycle_ended",  # how the cycle ended, written by the runner last (graph/machine/runner.py)
    # a broker's orders (graph/machine/broker/execution.py): the intent, acknowledged by the store before the
    # submit; the broker's answer; each later state of the order; a reconciliation; a halt or resume
    "order_intent",
    "order_ack",
    "order_update",
    "reconciliation",
    "broker_control",
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
# the kinds an older event stored under the key may be read as (schemas/events.py's kind upcasters move it there)
SPLIT_FROM: dict[str, tuple[str, ...]] = {
    "validation": ("validation", "dividend_paid", "position_exited", "abstained", "approval_decided")
}


def stored_kinds(kind: str) -> tuple[str, ...]:
    """The kinds an event read as `kind` may be stored under: its own, and an older kind it was split from."""
    return (kind, *(old for old, into in SPLIT_FROM.items() if kind in into and old != kind))


def split_kind(kind: str) -> bool:
    """An event stored under `kind` or read as it may have moved between kinds: filter by the kind as read."""
    return kind in SPLIT_FROM or any(kind in into for into in SPLIT_FROM.values())


# the payload key the store puts where it moved a payload into a pack (database/blobs.py): read back in full, a
# payload no longer holds it; one that still does is a payload whose pack could not be read (deleted or edited).
# Never a key of a payload we write; no `$`, which MongoDB before 5.0 refuses in a field name.
PACK_REF = "_pack"
