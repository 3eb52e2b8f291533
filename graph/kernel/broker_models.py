"""The broker capabilities' input and output models (graph/kernel/capabilities.py registers them)."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from graph.kernel.models import Input, Output, SessionId


class BrokerHaltInput(Input):
    by: str = Field("api", min_length=1, max_length=100, description="who halts; audited")
    reason: str = Field("", max_length=500, description="why; audited")
    cancel_open: bool = Field(False, description="also cancel every open tradegraph order at the broker")


class BrokerResumeInput(Input):
    by: str = Field("api", min_length=1, max_length=100, description="who resumes; audited")
    reason: str = Field("", max_length=500)


class BrokerControlOutput(Output):
    halted: bool
    by: str
    at: float
    reason: str = ""
    cancelled: list[str] = Field(default_factory=list, description="client_order_ids cancelled at the broker")


class BrokerStatusInput(Input):
    pass


class BrokerStatusOutput(Output):
    account: dict[str, Any]
    positions: dict[str, Any]
    open_orders: list[dict[str, Any]]
    halt: dict[str, Any]


class BrokerReconcileInput(Input):
    session_id: Optional[SessionId] = Field(None, description="one session's orders (default: every broker order)")


class BrokerReconcileOutput(Output):
    broker: str
    orders: int = Field(description="tradegraph's orders compared")
    updated: list[dict[str, Any]] = Field(
        description="orders that moved on since last seen, recorded as late order_update events"
    )
    drift: list[dict[str, Any]] = Field(description="what the broker and the ledger disagree on")
    clean: bool
