"""ANALYZING's contracts: one note per analyst per symbol, a quant answer, and the report."""

from __future__ import annotations

from typing import Literal, Optional, get_args

from pydantic import Field

from schemas.base import MAX_SYMBOLS, Contract, ShortText, Stance, Symbol, Unit

AnalystRole = Literal["news", "sentiment", "technical", "fundamental"]
ANALYST_ROLES: tuple[AnalystRole, ...] = get_args(AnalystRole)


class AnalystNote(Contract):
    symbol: Symbol
    analyst: AnalystRole
    stance: Stance
    confidence: Unit
    summary: ShortText
    key_points: list[str] = Field(default_factory=list, max_length=10)
    subscores: dict[str, float] = Field(default_factory=dict)
    evidence: list[str] = Field(default_factory=list, max_length=20)
    expectation_gap: Optional[float] = None
    time_horizon: str = Field(default="1-10 sessions", max_length=100)
    model_used: str = Field(default="", max_length=100)
    self_critiqued: bool = False


class QuantAnswer(Contract):
    symbol: Symbol
    question: ShortText
    answer: ShortText
    metrics: dict[str, Optional[float]] = Field(default_factory=dict)


class SymbolPanel(Contract):
    symbol: Symbol
    notes: list[AnalystNote] = Field(max_length=4)
    quant: Optional[QuantAnswer] = None
    failed_analysts: list[AnalystRole] = Field(default_factory=list)


class QuantReport(Contract):
    panels: list[SymbolPanel] = Field(min_length=1, max_length=MAX_SYMBOLS)
    degraded: bool = False

    def panel(self, symbol: str) -> SymbolPanel:
        for p in self.panels:
            if p.symbol == symbol:
                return p
        raise KeyError(symbol)
