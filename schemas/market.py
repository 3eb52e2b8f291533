"""SCANNING's contract: what the market looked like at the cycle's as-of date."""
from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, IsoDate, Price, Symbol
from schemas.features import FeatureBundle
from schemas.memory import ClosedTrade
from schemas.portfolio import PortfolioSnapshot


class MarketSnapshot(Contract):
    symbol: Symbol
    as_of: IsoDate
    last_bar_date: IsoDate
    price: Price
    prev_close: Price | None = None
    volume: float = Field(ge=0)
    bundle: FeatureBundle


class MarketScan(Contract):
    as_of: IsoDate
    universe: list[Symbol] = Field(min_length=1, max_length=50)
    snapshots: list[MarketSnapshot] = Field(min_length=1, max_length=50)
    portfolio: PortfolioSnapshot
    # point-in-time closes of held symbols outside the universe: the book is valued at market, never at cost
    marks: dict[Symbol, Price] = Field(default_factory=dict)
    # positions that closed on their stop, target or horizon in the bars since the last check, before this
    # cycle decides; `portfolio` is the book after them
    exits: list[ClosedTrade] = Field(default_factory=list, max_length=50)

    def prices(self) -> dict[str, float]:
        """A current price for every symbol traded or held."""
        return {**self.marks, **{s.symbol: s.price for s in self.snapshots}}

    def snapshot(self, symbol: str) -> MarketSnapshot:
        for s in self.snapshots:
            if s.symbol == symbol:
                return s
        raise KeyError(symbol)
