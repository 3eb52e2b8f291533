"""EXECUTING's contract."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import Contract
from schemas.decision import DecisionResult
from schemas.portfolio import PortfolioSnapshot

# what EXECUTING did with the decision (a broker's partial: some orders filled, or may still fill, others not)
ExecutionStatus = Literal["filled", "partial", "rejected", "hold"]


class ExecutionResult(Contract):
    cycle_id: str = Field(min_length=1, max_length=200)
    # partial: a broker cycle where some orders filled (or may still fill) and others did not (result.orders says
    # which); its cycle ends executed_with_errors, never completed
    status: ExecutionStatus
    result: DecisionResult
    portfolio_after: PortfolioSnapshot
    # True when this cycle had already executed and the stored result was returned instead
    replayed_from_ledger: bool = False
