"""VALIDATING's contract: the deterministic risk engine's verdict, check by check."""

from __future__ import annotations

from typing import Literal, Optional, get_args

from pydantic import Field

from schemas.base import Contract, Symbol

RiskCheckName = Literal[
    "degenerate_thesis",
    "size_nonzero",
    "daily_loss_cap",
    "margin_sufficient",
    "max_notional_pct",
    "max_positions",
    "exposure_cap",
]
RISK_CHECKS: tuple[RiskCheckName, ...] = get_args(RiskCheckName)


class RiskCheck(Contract):
    name: RiskCheckName
    symbol: Optional[Symbol] = None
    passed: bool
    value: Optional[float] = None
    limit: Optional[float] = None
    detail: str = Field(default="", max_length=500)


class DecisionValidation(Contract):
    passed: bool
    checks: list[RiskCheck] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
