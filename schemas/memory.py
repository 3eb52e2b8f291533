"""MEMORIZING's contract, the reviewer's TradeReview, and what the memory store holds and returns."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from schemas.base import (
    MAX_SYMBOLS,
    Contract,
    Direction,
    ExitReason,
    IsoDate,
    MemorisedStatus,
    Money,
    Pct,
    Price,
    ShortText,
    Symbol,
)

Outcome = Literal["win", "loss", "scratch"]
# seed 000's full set; code assigns one of the first three from the outcome (win/loss/scratch)
SignalEvolution = Literal["Realized", "Falsified", "Weakened", "Strengthened", "Unknown"]
MemoryKind = Literal["review", "cycle"]


class ClosedTrade(Contract):
    """A position that closed, with the thesis it was opened on: the reviewer's facts."""

    symbol: Symbol
    direction: Direction = "LONG"
    quantity: float = Field(gt=0)
    opened: IsoDate
    closed: IsoDate
    entry_price: Price
    exit_price: Price
    reason: ExitReason
    # the bar price the exit rule chose (the level, or the open on a gap, or the close at the horizon)
    trigger_price: Price
    realized_pnl: Money
    return_pct: Pct
    sessions_held: int = Field(ge=0)
    stop: Optional[Price] = None
    target: Optional[Price] = None
    horizon_sessions: Optional[int] = Field(default=None, ge=1)
    conviction: Optional[float] = Field(default=None, ge=0, le=1)
    # the opening cycle's regime words (trend, momentum, volatility): what a similar setup will share
    setup: list[str] = Field(default_factory=list, max_length=20)


class TradeReview(Contract):
    """Seed 000 stage 12. Only `critique` and `lessons` are the model's; code sets every other field."""

    symbol: Symbol
    direction: Direction = "LONG"
    outcome: Outcome
    realized_pnl: Money
    signal_evolution: SignalEvolution
    critique: ShortText
    lessons: list[str] = Field(default_factory=list, max_length=5)
    thesis_vs_outcome: str = Field(default="", max_length=1000)
    memory_record: str = Field(default="", max_length=2000)


# room for one symbol in a cycle summary that names each symbol's thesis and order
SUMMARY_PER_SYMBOL = 160


class AgentMemory(Contract):
    cycle_id: str = Field(min_length=1, max_length=200)
    as_of: IsoDate
    status: MemorisedStatus
    # the bounds below grow with the universe: a 20-symbol cycle's tags are its 20 symbols and its status
    summary: str = Field(min_length=1, max_length=SUMMARY_PER_SYMBOL * MAX_SYMBOLS)
    lessons: list[str] = Field(default_factory=list, max_length=10)
    # a thesis and an order per symbol (set by code)
    decisions: list[str] = Field(default_factory=list, max_length=2 * MAX_SYMBOLS)
    # every symbol, the status and a few words of the model's own
    tags: list[str] = Field(default_factory=list, max_length=MAX_SYMBOLS + 20)
    # the reviewer's output for each position this cycle closed (stop/target/horizon at the scan, signal sells)
    reviews: list[TradeReview] = Field(default_factory=list, max_length=MAX_SYMBOLS)


class MemoryNote(Contract):
    """What a memory says and how it is tagged: stored as a record, returned as a hit."""

    memory_id: str = Field(min_length=1, max_length=300)
    kind: MemoryKind
    symbol: Optional[Symbol] = None
    direction: Optional[Direction] = None
    outcome: Optional[Outcome] = None
    signal: Optional[SignalEvolution] = None
    # the as-of date it became known (a review: the exit date); a cycle at date t sees only known_at < t
    known_at: IsoDate
    text: str = Field(min_length=1, max_length=4000)


class MemoryRecord(MemoryNote):
    """One document of the `memories` collection."""

    session_id: str = Field(min_length=1, max_length=200)
    run_id: Optional[str] = Field(default=None, max_length=200)
    cycle_id: Optional[str] = Field(default=None, max_length=200)


class RetrievalHit(MemoryNote):
    """One recalled memory with its place in each ranking and its fused (RRF) score."""

    bm25_rank: int = Field(ge=1)
    dense_rank: int = Field(ge=1)
    score: float
