"""The graph state. Contracts are stored as JSON-ready dicts so checkpoints, Studio and replay all see
plain data; each node re-validates the contracts it reads."""

from __future__ import annotations

from typing import Any, Optional, TypedDict

# which state key holds which state's contract is a column of the state table
from schemas.states import CONTRACT_KEYS  # noqa: F401


class CycleInput(TypedDict, total=False):
    symbols: list[str]
    as_of: str
    session_id: str
    cycle_id: str
    portfolio: dict[str, Any]
    # the stored portfolio's version when the cycle read it: EXECUTING commits only against that version
    portfolio_version: Optional[int]
    # pause before EXECUTING until a person approves or rejects (tradegraph run --approve)
    approval_required: bool
    # in a backtest: the decision point's Case as the agent may see it (case.for_agent(): no metadata)
    case: dict[str, Any]


class CycleState(CycleInput, total=False):
    scan: dict[str, Any]
    plan: dict[str, Any]
    quant: dict[str, Any]
    debate: dict[str, Any]
    decision: dict[str, Any]
    validation: dict[str, Any]
    execution: dict[str, Any]
    memory: dict[str, Any]
    status: str
    approval: Optional[dict[str, Any]]
    error: Optional[dict[str, Any]]
    last_state: str
