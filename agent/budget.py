"""LLM budgets: tokens, dollars and calls, per cycle (`run`) or per whole run (`backtest`). The call that would
cross one is refused BEFORE it is sent, and the cycle fails closed, audited (an error naming the budget, its
limit and what was used).

Enforced in agent/passes.py, the one place every LLM call goes through, rather than in a callback:
callback order is not guaranteed, and a refusal must neither hide a paid answer from the audit nor
leave a recorded request without its response.

What a call "would" use is not known before it answers, so each call reserves its worst case first:
- calls: one request (every attempt counts, retries included; an answer from the response cache sends nothing);
- tokens: the request's input estimated at ~4 characters a token (messages, tools offered, response format) plus
  the most it may answer: the model's own output cap (max_tokens, max_output_tokens, num_predict) when set, else
  DEFAULT_OUTPUT_RESERVE;
- dollars: those tokens at the model's price (agent/prices.toml); a model without a price can't be held to a
  dollar budget, so with one set its call is refused.
The reservation is atomic (parallel analysts can't both slip under a limit) and is replaced by the call's real
usage when it answers. Estimates are estimates: a provider that counts more input tokens than ~4 characters each
can end a little over a token or dollar limit, never by a whole unplanned call.

The usage a provider reports is checked before it replaces the reservation (`usage_problem`): token counts that are
not whole numbers between 0 and MAX_REPORTED_TOKENS, a total below input + output, a cost that is negative or not a
number. Such a report is not believed: the call counts as its reservation (its whole cap) and the caller audits it
(a `usage` validation, agent/passes.py). A provider answering `total_tokens: -1000000000` would otherwise give the
budget back a billion tokens and let every later call through.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Protocol

DEFAULT_OUTPUT_RESERVE = 1024  # tokens a call with no output cap of its own is assumed to answer at most
_OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
# more tokens than any one request can use (the largest context windows offered hold 1-2 million): a report above it
# is nonsense, not usage
MAX_REPORTED_TOKENS = 10_000_000
_REPORTED = ("input_tokens", "output_tokens", "total_tokens")


def usage_problem(usage: dict[str, Any], cost: Optional[float]) -> Optional[str]:
    """Why a call's reported usage (agent/pricing.py usage_of) and its dollars can't be believed, or None."""
    for name in _REPORTED:
        value = usage.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPORTED_TOKENS:
            return f"reported {name} {value!r} is not a whole number from 0 to {MAX_REPORTED_TOKENS:,}"
    if usage["total_tokens"] < usage["input_tokens"] + usage["output_tokens"]:
        return (
            f"reported total_tokens {usage['total_tokens']} is less than input_tokens + output_tokens "
            f"({usage['input_tokens']} + {usage['output_tokens']})"
        )
    if cost is not None and (not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0):
        return f"the call's cost {cost!r} is not a non-negative number of dollars"
    return None


class BudgetExceeded(RuntimeError):
    budget = ""

    def __init__(self, message: str, *, limit: float, used: float, needed: float, scope: str, reserved: float = 0):
        super().__init__(message)
        # used: spent by calls that answered; reserved: held by calls still in flight (parallel analysts)
        self.limit, self.used, self.needed, self.scope, self.reserved = limit, used, needed, scope, reserved


class TokenBudgetExceeded(BudgetExceeded):
    budget = "max_tokens"


class CostBudgetExceeded(BudgetExceeded):
    budget = "max_cost"


class CallBudgetExceeded(BudgetExceeded):
    budget = "max_llm_calls"


@dataclass
class Reservation:
    tokens: int
    cost: float


class Spending(Protocol):
    """What a cycle's calls need of a budget: Budget, or the limits every episode of a sweep shares
    (graph/services/sweep/limits.py SweepBudget)."""

    scope: str

    def reserve(self, input_tokens: int, max_output: int, price: Any, model: str) -> Reservation: ...

    def settle_answer(self, held: Reservation, usage: dict[str, Any], cost: Optional[float]) -> Optional[str]: ...

    def settle(self, held: Reservation, tokens: int, cost: Optional[float]) -> None: ...

    def spent(self, tokens: int, cost: float, calls: int) -> None: ...

    def as_dict(self) -> dict[str, Any]: ...


def settle_reported(budget: Spending, held: Reservation, usage: dict[str, Any], cost: Optional[float]) -> Optional[str]:
    """An answered call settled with its reported usage, checked first: a report that can't be believed
    (`usage_problem`) counts as the reservation, the call's whole cap, and why is returned for the audit."""
    problem = usage_problem(usage, cost)
    if problem is not None:
        budget.settle(held, held.tokens, held.cost)
    else:
        budget.settle(held, usage["total_tokens"], cost)
    return problem


class Budget:
    """The limits of one cycle, or of one backtest run (shared by its cycles). None = no limit."""

    def __init__(
        self,
        max_tokens: Optional[int] = None,
        max_cost: Optional[float] = None,
        max_llm_calls: Optional[int] = None,
        scope: str = "cycle",
    ):
        self.max_tokens, self.max_cost, self.max_llm_calls, self.scope = max_tokens, max_cost, max_llm_calls, scope
        self.tokens = 0
        self.cost = 0.0
        self.calls = 0
        self._held = Reservation(0, 0.0)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Any, scope: str = "cycle") -> Optional[Budget]:
        """From agent.config.AgentConfig (token_budget is max_tokens); None when it sets no limit."""
        limits = (settings.token_budget, settings.max_cost, settings.max_llm_calls)
        return cls(*limits, scope=scope) if any(v for v in limits) else None

    def spent(self, tokens: int, cost: float, calls: int) -> None:
        """What was used before this process took over (a resumed backtest's earlier points)."""
        with self._lock:
            self.tokens, self.cost, self.calls = self.tokens + tokens, self.cost + cost, self.calls + calls

    def reserve(self, input_tokens: int, max_output: int, price: Any, model: str) -> Reservation:
        # the worst case in dollars too (when priced): what a call whose usage report is nonsense is counted as
        need = Reservation(
            input_tokens + max_output,
            (input_tokens * price.input + max_output * price.output) / 1e6 if price is not None else 0.0,
        )
        with self._lock:
            per = f"per {self.scope}"
            if self.max_llm_calls and self.calls + 1 > self.max_llm_calls:
                raise CallBudgetExceeded(
                    f"LLM call budget (max_llm_calls) of {self.max_llm_calls} {per} used up: {self.calls} call(s) "
                    f"sent; the next call to {model} was not sent",
                    limit=self.max_llm_calls,
                    used=self.calls,
                    needed=1,
                    scope=self.scope,
                )
            held = self._held
            in_flight = f" (+{held.tokens} held by calls in flight)" if held.tokens else ""
            if self.max_tokens and self.tokens + held.tokens + need.tokens > self.max_tokens:
                raise TokenBudgetExceeded(
                    f"token budget (max_tokens) of {self.max_tokens} {per} would be crossed: {self.tokens} used "
                    f"in {self.calls} call(s){in_flight}, the next call to {model} may use {need.tokens} "
                    f"({input_tokens} input, estimated, + {max_output} output at most); it was not sent",
                    limit=self.max_tokens,
                    used=self.tokens,
                    reserved=held.tokens,
                    needed=need.tokens,
                    scope=self.scope,
                )
            if self.max_cost:
                in_flight = f" (+${held.cost:.6f} held by calls in flight)" if held.cost else ""
                if price is None:
                    raise CostBudgetExceeded(
                        f"cost budget (max_cost) of ${self.max_cost:g} {per} can't be held: {model} has no price "
                        f"(add it to agent/prices.toml or $TRADEGRAPH_PRICES); the call was not sent",
                        limit=self.max_cost,
                        used=round(self.cost, 8),
                        reserved=round(held.cost, 8),
                        needed=float("nan"),
                        scope=self.scope,
                    )
                if self.cost + held.cost + need.cost > self.max_cost:
                    raise CostBudgetExceeded(
                        f"cost budget (max_cost) of ${self.max_cost:g} {per} would be crossed: ${self.cost:.6f} "
                        f"used in {self.calls} call(s){in_flight}, the next call to {model} may cost "
                        f"${need.cost:.6f}; it was not sent",
                        limit=self.max_cost,
                        used=round(self.cost, 8),
                        reserved=round(held.cost, 8),
                        needed=round(need.cost, 8),
                        scope=self.scope,
                    )
            self.calls += 1
            self._held = Reservation(self._held.tokens + need.tokens, self._held.cost + need.cost)
        return need

    def settle_answer(self, held: Reservation, usage: dict[str, Any], cost: Optional[float]) -> Optional[str]:
        return settle_reported(self, held, usage, cost)

    def settle(self, held: Reservation, tokens: int, cost: Optional[float]) -> None:
        """The reservation replaced by what the call really used (a failed attempt: nothing). Never less than
        nothing: a count that is not a non-negative number is taken as the reservation (settle_answer says why)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_REPORTED_TOKENS:
            tokens = held.tokens
        if cost is not None and (not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0):
            cost = held.cost
        with self._lock:
            self._held = Reservation(self._held.tokens - held.tokens, self._held.cost - held.cost)
            self.tokens += int(tokens)
            self.cost += float(cost or 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "max_tokens": self.max_tokens,
            "max_cost": self.max_cost,
            "max_llm_calls": self.max_llm_calls,
            "tokens": self.tokens,
            "cost_usd": round(self.cost, 8),
            "calls": self.calls,
        }


# a LangGraph Studio server's runs carry only strings in their config: their budgets come from the process's
# configuration (graph/machine/cycle_context.py set_default_services installs it), one Budget per cycle id
_process: dict[str, Any] = {"settings": None, "cycles": OrderedDict()}
_process_lock = threading.Lock()


def install_process_budgets(settings: Any) -> None:
    with _process_lock:
        _process["settings"], _process["cycles"] = settings, OrderedDict()


def process_budget(cycle_id: Optional[str]) -> Optional[Budget]:
    """A Studio run's budget for its cycle (graph/machine/cycle_context.py puts it in the run's context); None before
    install_process_budgets or without a cycle id."""
    with _process_lock:
        if _process["settings"] is None or not cycle_id:
            return None
        cycles = _process["cycles"]
        if cycle_id not in cycles:
            cycles[cycle_id] = Budget.of(_process["settings"])
            while len(cycles) > 256:  # a long-lived server: old cycles' budgets are done with
                cycles.popitem(last=False)
        return cycles[cycle_id]


def output_cap(model: Any, kwargs: dict) -> int:
    # Ollama's num_predict travels in its options, an OpenAI-compatible server's max_tokens in the extra body
    # (agent/providers.py capped)
    nested = [kwargs.get(k) for k in ("options", "extra_body") if isinstance(kwargs.get(k), dict)]
    for source in (kwargs, *nested, model.__dict__ if hasattr(model, "__dict__") else {}):
        for name in _OUTPUT_CAPS:
            value = source.get(name) if isinstance(source, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return DEFAULT_OUTPUT_RESERVE


def request_tokens(messages: list, kwargs: dict) -> int:
    """The request's input tokens, estimated as the offline model counts them (agent/offline_model.py)."""
    from agent.offline_model import _message_text, estimate_tokens

    extra = {k: kwargs[k] for k in ("tools", "response_format") if kwargs.get(k)}
    return sum(estimate_tokens(_message_text(m)) for m in messages) + (
        estimate_tokens(json.dumps(extra, default=str)) if extra else 0
    )
