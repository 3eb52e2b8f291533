"""What a broker cycle reports per order (EXECUTING's contract, schemas/execution.py): what was asked, what filled
at what price, and what did not and why. A simulated cycle has none of these (it fills all or nothing)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from schemas.base import Contract, Side, Symbol


class BrokerOrderOutcome(Contract):
    client_order_id: str = Field(min_length=1, max_length=128)
    broker_order_id: Optional[str] = Field(default=None, max_length=100)
    symbol: Symbol
    side: Side
    quantity: float = Field(gt=0)
    filled_quantity: float = Field(ge=0)
    avg_price: Optional[float] = Field(default=None, gt=0)
    # the broker's status when EXECUTING ended (filled, partially_filled, canceled, rejected, …), or `not_submitted`
    status: str = Field(min_length=1, max_length=40)
    reason: Optional[str] = Field(default=None, max_length=500)
