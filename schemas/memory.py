"""MEMORIZING's contract."""
from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, CycleStatus, IsoDate, ShortText


class AgentMemory(Contract):
    cycle_id: str = Field(min_length=1, max_length=200)
    as_of: IsoDate
    status: CycleStatus
    summary: ShortText
    lessons: list[str] = Field(default_factory=list, max_length=10)
    decisions: list[str] = Field(default_factory=list, max_length=50)
    tags: list[str] = Field(default_factory=list, max_length=20)
