"""SCANNING's contract: what the market looked like at the cycle's as-of date."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from schemas.base import MAX_SYMBOLS, Contract, IsoDate, Price, Symbol, unset
from schemas.features import FeatureBundle
from schemas.memory import ClosedTrade
from schemas.portfolio import DividendCredit, PortfolioSnapshot


class MarketSnapshot(Contract):
    symbol: Symbol
    as_of: IsoDate
    last_bar_date: IsoDate
    price: Price
    prev_close: Price | None = None
    volume: float = Field(ge=0)
    bundle: FeatureBundle


class Untradable(Contract):
    """A symbol the cycle cannot trade: the data has no bar for it on the decision day. It is never filled at a
    stale price; a held position is valued at `price`, the last price the decision may know, from `price_date`."""

    symbol: Symbol
    reason: str = Field(min_length=1, max_length=300)
    price: Optional[Price] = None
    price_date: Optional[IsoDate] = None


class MarketScan(Contract):
    as_of: IsoDate
    universe: list[Symbol] = Field(min_length=1, max_length=MAX_SYMBOLS)
    snapshots: list[MarketSnapshot] = Field(min_length=1, max_length=MAX_SYMBOLS)
    portfolio: PortfolioSnapshot
    # point-in-time closes of held symbols outside the universe: the book is valued at market, never at cost
    marks: dict[Symbol, Price] = Field(default_factory=dict)
    # positions that closed on their stop, target or horizon in the bars since the last check, before this
    # cycle decides; `portfolio` is the book after them
    exits: list[ClosedTrade] = Field(default_factory=list, max_length=MAX_SYMBOLS)
    # cash dividends of held positions whose ex-date fell since the last check, credited before this cycle decides
    # (and before its exits' fills); `portfolio` includes them. Left out of the record when empty
    dividends: list[DividendCredit] = Field(default_factory=list, max_length=10 * MAX_SYMBOLS, exclude_if=unset)
    # held symbols with no bar on the decision day (in a backtest, also listed tickers left out of the cycle)
    untradable: list[Untradable] = Field(default_factory=list, max_length=MAX_SYMBOLS, exclude_if=unset)

    def prices(self) -> dict[str, float]:
        """A current price for every symbol traded or held."""
        return {**self.marks, **{s.symbol: s.price for s in self.snapshots}}

    def snapshot(self, symbol: str) -> MarketSnapshot:
        for s in self.snapshots:
            if s.symbol == symbol:
                return s
        raise KeyError(symbol)
