"""Shared building blocks for every contract: strictness, bounded numbers, symbol shape."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# 2: dividends, exits, abstentions and approvals have kinds of their own; 3: an idempotency key's later use is a
# `repeat`, no longer a `replay` (schemas/events.py, the upcasters)
SCHEMA_VERSION = 3
# the most symbols one cycle takes (StockBench's universe is 20): every list and text that grows with the symbols
# (universe, snapshots, panels, debates, theses, orders, exits, reviews, memory tags) is sized from it
MAX_SYMBOLS = 100

Symbol = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9.\-]{0,9}$")]
IsoDate = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")]
Price = Annotated[float, Field(gt=0, lt=1e7)]
NonNegMoney = Annotated[float, Field(ge=0, lt=1e12)]
Money = Annotated[float, Field(gt=-1e12, lt=1e12)]
Unit = Annotated[float, Field(ge=0, le=1)]
Stance = Annotated[float, Field(ge=-1, le=1)]
Pct = Annotated[float, Field(ge=-1000, le=1000)]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=2000)]
Direction = Literal["LONG", "SHORT"]
# why a position closed: its stop, its target, its horizon (at the close), or a decision to sell
ExitReason = Literal["stop", "target", "horizon", "signal"]
Side = Literal["BUY", "SELL"]

# the statuses a cycle can have when MEMORIZING writes its note (schemas/memory.py AgentMemory): the model is shown
# this enum, so it stays as it was (the prompts, tool schemas and recordings' hashes with it)
MemorisedStatus = Literal["completed", "rejected", "failed", "degraded"]
# how a cycle ended: every status the README's table documents, what the CLI prints and the `cycle_ended` event
# carries (schemas/events.py)
CycleStatus = Literal[MemorisedStatus, "pending_approval", "executed_with_errors"]
# a status read back from a recording (graph/machine/recording.py): a cycle's own, or `cut_off` when its log stops
# before it ended (its process died, its store went away), which only a reader can say
RecordedStatus = Literal[CycleStatus, "cut_off"]


def unset(value) -> bool:
    """`exclude_if` of a field added after recordings were made: left out of a record while None or empty, so a
    contract that does not use it dumps as it did before, and a recording made then replays identical."""
    return value is None or value == [] or value == {}


class Contract(BaseModel):
    """Base of every contract: unknown fields are an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True)
