"""Limits every worker of a sweep shares: one rate limiter per provider (requests and tokens per minute) and one
budget (tokens, dollars, calls) for the whole sweep.

`SharedLimits` is a plain class, run as ONE Ray actor per sweep (actor methods run one at a time, so it needs no
lock of its own); each episode's cycles talk to it through `SweepBudget`, which stands where agent/budget.py's
Budget stands in the services, so agent/passes.py checks it before every attempt exactly as it checks a local one.
A refusal crosses the process boundary as data and is raised again in the worker as the same BudgetExceeded
class, so the cycle fails closed and audits `budget_exceeded` as it does on one machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from agent.budget import (
    Budget,
    BudgetExceeded,
    CallBudgetExceeded,
    CostBudgetExceeded,
    Reservation,
    TokenBudgetExceeded,
    settle_reported,
)

REFUSALS = {c.__name__: c for c in (TokenBudgetExceeded, CostBudgetExceeded, CallBudgetExceeded)}
# the longest a worker sleeps before asking the limiter again: short enough to react to a freed minute
MAX_NAP_S = 5.0


@dataclass
class Bucket:
    """A token bucket holding up to `per_minute`, refilled continuously."""

    per_minute: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.per_minute, self.level + (now - self.at) * self.per_minute / 60.0)
        self.at = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is there (0.0: now). More than a minute's allowance waits for a full bucket."""
        amount = min(amount, self.per_minute)
        return max(0.0, (amount - self.level) * 60.0 / self.per_minute)

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.per_minute)


@dataclass
class SweepReservation(Reservation):
    rid: int = 0


class SharedLimits:
    def __init__(
        self,
        *,
        max_tokens: Optional[int] = None,
        max_cost: Optional[float] = None,
        max_llm_calls: Optional[int] = None,
        requests_per_minute: Optional[float] = None,
        tokens_per_minute: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.budget = Budget(max_tokens, max_cost, max_llm_calls, scope="sweep")
        self.rpm, self.tpm, self.clock = requests_per_minute, tokens_per_minute, clock
        self.buckets: dict[str, tuple[Optional[Bucket], Optional[Bucket]]] = {}
        self.held: dict[int, Reservation] = {}
        self.counted: dict[str, list[float]] = {}  # episode -> [tokens, usd, calls] this actor saw it spend
        self.waits = 0
        self._next = 0

    # ---------------------------------------------------------------- rate
    def acquire(self, provider: str, tokens: int) -> float:
        """0.0 once a request of `tokens` to `provider` may go now (its share taken), else seconds to wait."""
        now = self.clock()
        if provider not in self.buckets:
            self.buckets[provider] = (
                Bucket(self.rpm, self.rpm, now) if self.rpm else None,
                Bucket(self.tpm, self.tpm, now) if self.tpm else None,
            )
        wanted = [(b, amount) for b, amount in zip(self.buckets[provider], (1, tokens)) if b is not None]
        for b, _ in wanted:
            b.refill(now)
        # both checked before either is taken, so a request told to wait leaves both buckets as they were
        wait = max([b.wait_for(amount) for b, amount in wanted], default=0.0)
        if wait > 0:
            self.waits += 1
            return wait
        for b, amount in wanted:
            b.take(amount)
        return 0.0

    # ---------------------------------------------------------------- budget
    def reserve(self, episode: str, input_tokens: int, max_output: int, price: Any, model: str) -> dict:
        try:
            r = self.budget.reserve(input_tokens, max_output, price, model)
        except BudgetExceeded as e:
            return {
                "refused": type(e).__name__,
                "message": str(e),
                "limit": e.limit,
                "used": e.used,
                "needed": e.needed,
                "reserved": e.reserved,
            }
        self._next += 1
        self.held[self._next] = r
        self.counted.setdefault(episode, [0, 0.0, 0])[2] += 1
        return {"rid": self._next, "tokens": r.tokens, "cost": r.cost}

    def settle(self, episode: str, rid: int, tokens: int, cost: Optional[float]) -> None:
        held = self.held.pop(rid, None)
        if held is None:
            return
        self.budget.settle(held, tokens, cost)
        c = self.counted.setdefault(episode, [0, 0.0, 0])
        c[0] += int(tokens)
        c[1] += float(cost or 0.0)

    def spent(self, episode: str, tokens: int, cost: float, calls: int) -> None:
        """An episode's spending logged before this actor existed (a resumed sweep, a retried episode): only
        the part this actor has not already counted live, so a Ray retry does not count its points twice."""
        c = self.counted.setdefault(episode, [0, 0.0, 0])
        extra = (max(0, int(tokens) - c[0]), max(0.0, float(cost) - c[1]), max(0, int(calls) - c[2]))
        if any(extra):
            self.budget.spent(int(extra[0]), extra[1], int(extra[2]))
            c[0], c[1], c[2] = c[0] + extra[0], c[1] + extra[1], c[2] + extra[2]

    def state(self) -> dict:
        return {
            **self.budget.as_dict(),
            "rate_waits": self.waits,
            "requests_per_minute": self.rpm,
            "tokens_per_minute": self.tpm,
        }


class SweepBudget:
    """The sweep's shared limits as one episode's Budget (agent/budget.py's interface)."""

    scope = "sweep"

    def __init__(
        self,
        actor: Any,
        episode: str,
        provider_of: Callable[[str], Optional[str]],
        call: Callable[[Any], Any],
        sleep: Callable[[float], None] = time.sleep,
    ):
        # call(actor.method.remote(...)) -> its value: ray.get in a worker; the identity for a local SharedLimits
        self.actor, self.episode, self.provider_of, self.call, self.sleep = actor, episode, provider_of, call, sleep

    def _invoke(self, method: str, *args):
        fn = getattr(self.actor, method)
        return self.call(fn.remote(*args) if hasattr(fn, "remote") else fn(*args))

    def reserve(self, input_tokens: int, max_output: int, price: Any, model: str) -> Reservation:
        got = self._invoke("reserve", self.episode, input_tokens, max_output, price, model)
        if "refused" in got:
            cls = REFUSALS[got["refused"]]
            raise cls(
                got["message"],
                limit=got["limit"],
                used=got["used"],
                needed=got["needed"],
                scope="sweep",
                reserved=got["reserved"],
            )
        provider = self.provider_of(model)
        if provider is not None:  # the offline model is not rate limited
            while (wait := self._invoke("acquire", provider, input_tokens + max_output)) > 0:
                self.sleep(min(wait, MAX_NAP_S))
        return SweepReservation(got["tokens"], got["cost"], got["rid"])

    def settle_answer(self, held: Reservation, usage: dict[str, Any], cost: Optional[float]) -> Optional[str]:
        return settle_reported(self, held, usage, cost)

    def settle(self, held: Reservation, tokens: int, cost: Optional[float]) -> None:
        self._invoke("settle", self.episode, getattr(held, "rid", 0), tokens, cost)

    def spent(self, tokens: int, cost: float, calls: int) -> None:
        self._invoke("spent", self.episode, tokens, cost, calls)

    def as_dict(self) -> dict:
        return self._invoke("state")
