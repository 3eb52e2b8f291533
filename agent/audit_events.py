"""Audit events that only the state code knows about (transitions, contracts, validations, errors).

They travel through LangChain's callback system as custom events, so the one audit handler
that records LLM and tool calls records these too, in the same order, from any thread.
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.runnables import RunnableConfig

AUDIT_EVENT = "tradegraph.audit"


def emit(kind: str, payload: dict[str, Any], config: RunnableConfig | None) -> None:
    dispatch_custom_event(AUDIT_EVENT, {"kind": kind, "payload": payload}, config=config)
