"""PLANNING's contract."""
from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, ShortText, Symbol


class Plan(Contract):
    objective: ShortText
    assets: list[Symbol] = Field(min_length=1, max_length=50)
    quant_question: ShortText
    timeframes: list[str] = Field(min_length=1, max_length=5)
    constraints: dict[str, str | float | int | bool]
    expected_outputs: list[str] = Field(min_length=1, max_length=20)
