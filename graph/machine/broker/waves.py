"""How a broker cycle's orders leave: every sell before any buy, and each side in waves that widen — its first
order alone, then 2, 4, and at most WIDEST at once — with the halt read once before each wave.

Why waves and not one order at a time: each order costs the SDK's request building and parsing and a round trip;
sent one by one, a 20-order cycle spent most of its time waiting on them in turn. Why they widen: a broker that
refuses the first order (buying power, a bad key, a halted asset) or a halt raised while it is out stops the rest
before any leaves; only once orders go through are more sent together.

What a halt can still let through: the halt is read before each wave, so one stored after that read stops every
later wave, and the orders of the wave already under way (at most WIDEST; 1 when it is a side's first) may still
reach the broker. Before, one order per process could (the one whose read preceded the halt)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from schemas.decision import Order

WIDEST = 8
L = TypeVar("L", bound=tuple[int, Order, str])  # (leg, order, client_order_id)


def waves(legs: Sequence[L], widest: int = WIDEST) -> list[list[L]]:
    out: list[list[L]] = []
    for side in ("SELL", "BUY"):
        group = [leg for leg in legs if leg[1].side == side]
        start, size = 0, 1
        while start < len(group):
            out.append(group[start : start + size])
            start, size = start + size, min(size * 2, widest)
    return out
