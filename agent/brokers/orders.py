"""A broker's answers as tradegraph reads them, free of any SDK: an order's state, and the two ways a call fails
(refused for good, or no answer at all)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

TERMINAL = ("filled", "canceled", "expired", "rejected", "done_for_day", "replaced", "stopped", "suspended")


class BrokerRejected(RuntimeError):
    """The broker answered no, for good (buying power, asset not tradable, …): the order does not exist."""

    def __init__(self, status: Optional[int], message: str):
        super().__init__(f"broker refused ({status}): {message}")
        self.status, self.reason = status, message


class BrokerUnavailable(RuntimeError):
    """No answer after every retry: whether an order exists is unknown until it is looked up again."""


@dataclass(frozen=True)
class OrderView:
    id: str
    client_order_id: str
    symbol: str
    side: str  # BUY | SELL
    qty: float
    filled_qty: float
    filled_avg_price: Optional[float]
    status: str

    @property
    def open(self) -> bool:
        return self.status not in TERMINAL

    def as_dict(self) -> dict[str, Any]:
        return {
            "broker_order_id": self.id,
            "client_order_id": self.client_order_id,
            "symbol": self.symbol,
            "side": self.side,
            "quantity": self.qty,
            "filled_quantity": self.filled_qty,
            "avg_price": self.filled_avg_price,
            "status": self.status,
        }


@dataclass(frozen=True)
class Placed:
    """A submit's answer: the order, whether it was already at the broker (a lost answer, a killed process, a
    duplicate id), and what was retried on the way (the order_ack's `retries`)."""

    view: OrderView
    existing: bool
    retries: list[str]
