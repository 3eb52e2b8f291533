"""PLANNING's contract."""

from __future__ import annotations

from pydantic import Field, field_validator

from schemas.base import MAX_SYMBOLS, Contract, ShortText, Symbol


class Plan(Contract):
    objective: ShortText
    assets: list[Symbol] = Field(min_length=1, max_length=MAX_SYMBOLS)
    quant_question: ShortText
    timeframes: list[str] = Field(min_length=1, max_length=5)
    constraints: dict[str, str | float | int | bool]
    # a model may name an output per symbol: sized from the universe too
    expected_outputs: list[str] = Field(min_length=1, max_length=MAX_SYMBOLS)

    @field_validator("assets")
    @classmethod
    def _each_asset_once(cls, assets: list[str]) -> list[str]:
        # a repeated asset would get two panels, two theses and two orders: double the position
        seen = [a for i, a in enumerate(assets) if a in assets[:i]]
        if seen:
            raise ValueError(f"assets must be distinct; repeated: {', '.join(sorted(set(seen)))}")
        return assets
