"""StateEvent: one document of the `state_events` audit log."""
from __future__ import annotations

from typing import Any, Literal, Optional, get_args

from pydantic import Field

from schemas.base import SCHEMA_VERSION, Contract

EventKind = Literal[
    "manifest", "transition", "llm_request", "llm_response", "tool_call", "tool_result", "contract", "validation",
    "error", "retrieval",
    "telemetry",  # a failed or skipped OpenTelemetry export (graph/telemetry/live.py)
    "idempotency",  # a use of an idempotency key: the first answer, a replay, a refusal (graph/kernel/idempotent.py)
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)


class StateEvent(Contract):
    event_id: str = Field(min_length=1, max_length=200)
    session_id: str = Field(min_length=1, max_length=200)
    cycle_id: str = Field(min_length=1, max_length=200)
    seq: int = Field(ge=1)
    ts: float = Field(gt=0)
    state: str = Field(max_length=50)
    kind: EventKind
    payload: dict[str, Any]
    schema_version: int = SCHEMA_VERSION
    run_id: Optional[str] = None
    parent_run_id: Optional[str] = None
    # tamper evidence, set by the store on append: sha256 of the previous event of the session, and of this one
    prev_hash: Optional[str] = Field(default=None, max_length=64)
    hash: Optional[str] = Field(default=None, max_length=64)
