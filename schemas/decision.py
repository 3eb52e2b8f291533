"""DECIDING's contracts, and the order/execution types shared by standalone runs and episodes."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from schemas.base import (
    MAX_SYMBOLS,
    Contract,
    Direction,
    ExitReason,
    IsoDate,
    NonNegMoney,
    Price,
    ShortText,
    Side,
    Symbol,
    Unit,
    unset,
)
from schemas.broker import BrokerOrderOutcome

# room for one symbol's clause in a text that lists every symbol (a decision's rationale, a cycle's summary)
RATIONALE_PER_SYMBOL = 120


class TradeThesis(Contract):
    symbol: Symbol
    direction: Direction
    conviction: Unit
    entry: Price
    target: Price
    stop: Price
    horizon_sessions: int = Field(ge=1, le=260)
    rationale: ShortText
    invalidation_conditions: list[str] = Field(default_factory=list, max_length=10)
    key_risks: list[str] = Field(default_factory=list, max_length=10)
    expected_horizon: str = Field(default="", max_length=200)
    # who set the three prices: code from ATR anchors, or the model when ATR is sub-tick
    price_source: Literal["model", "atr_anchor"] = "model"
    atr14: Optional[float] = Field(default=None, gt=0)


class Order(Contract):
    symbol: Symbol
    side: Side
    # 0 is representable so that a zero-size order reaches the risk check and the broker, which refuse it
    quantity: float = Field(ge=0, lt=1e10)
    # a bracket on a BUY, set by the sizer from the thesis: the position keeps these levels until it exits
    stop: Optional[Price] = None
    target: Optional[Price] = None
    horizon_sessions: Optional[int] = Field(default=None, ge=1, le=260)
    conviction: Optional[Unit] = None
    # the regime words of the setup it was opened in, for the reviewer and for recalling similar setups
    setup: list[str] = Field(default_factory=list, max_length=20)


class Decision(Contract):
    """What an agent submits; an empty order list is a hold."""

    orders: list[Order] = Field(default_factory=list, max_length=MAX_SYMBOLS)


class PortfolioDecision(Contract):
    theses: list[TradeThesis] = Field(default_factory=list, max_length=MAX_SYMBOLS)
    orders: list[Order] = Field(default_factory=list, max_length=MAX_SYMBOLS)
    # written by code: a clause per thesis and the symbols no lot fits, so it grows with the universe
    rationale: str = Field(min_length=1, max_length=RATIONALE_PER_SYMBOL * MAX_SYMBOLS)

    def as_decision(self) -> Decision:
        return Decision(orders=list(self.orders))


class ExecutedTrade(Contract):
    order_index: int = Field(ge=0)
    symbol: Symbol
    side: Side
    quantity: float = Field(gt=0)
    price: Price
    fees: NonNegMoney = 0.0
    notional: NonNegMoney
    date: IsoDate
    # set on sells: `signal` (a decision's order) or the level that closed the position
    reason: Optional[ExitReason] = None


class DecisionResult(Contract):
    status: Literal["accepted", "rejected"]
    message: str = ""
    executed_trades: list[ExecutedTrade] = Field(default_factory=list)
    # a broker's cycle: every order's outcome (schemas/broker.py); absent from a simulated fill's record
    orders: Optional[list[BrokerOrderOutcome]] = Field(default=None, exclude_if=unset)

    @model_validator(mode="after")
    def _trades_only_when_accepted(self) -> DecisionResult:
        if self.status == "rejected" and self.executed_trades:
            raise ValueError("a rejected decision cannot carry executed trades")
        if self.status == "rejected" and not self.message:
            raise ValueError("a rejected decision must say why")
        return self
