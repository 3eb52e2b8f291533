"""DEBATE's contracts: each side's case, and the research manager's verdict per symbol."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import MAX_SYMBOLS, Contract, Direction, ShortText, Symbol, Unit


class DebateCase(Contract):
    symbol: Symbol
    side: Literal["bull", "bear"]
    argument: ShortText
    supporting_points: list[str] = Field(default_factory=list, max_length=10)
    risks: list[str] = Field(default_factory=list, max_length=10)


class ManagerVerdict(Contract):
    """What the research manager model answers; calibration happens in code afterwards."""

    symbol: Symbol
    winner: Direction
    conviction: Unit
    manager_rationale: ShortText
    key_disagreements: list[str] = Field(default_factory=list, max_length=10)
    falsifiers: list[str] = Field(default_factory=list, max_length=10)


class DebateResult(ManagerVerdict):
    """The verdict after code's calibration: `conviction` is calibrated, `raw_conviction` the model's.
    `winner` NONE: no analyst took a side (all abstained or neutral), so code held the debate back: hold."""

    # wider than the model's answer on purpose: code, not the model, holds a debate nobody argued
    winner: Direction | Literal["NONE"]  # type: ignore[assignment]
    raw_conviction: Unit
    opposition_share: Unit
    rebuttals: list[DebateCase] = Field(default_factory=list, max_length=2)
    rebuttal_fallbacks: list[Literal["bull", "bear"]] = Field(default_factory=list)


class DebateReport(Contract):
    results: list[DebateResult] = Field(min_length=1, max_length=MAX_SYMBOLS)

    def result(self, symbol: str) -> DebateResult:
        for r in self.results:
            if r.symbol == symbol:
                return r
        raise KeyError(symbol)
