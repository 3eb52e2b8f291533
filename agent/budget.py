"""A per-cycle token budget: once a cycle's LLM calls have used it up, the next call is refused before
it is sent and the cycle fails closed, audited.

Enforced in agent/passes.py, the one place every LLM call goes through, rather than in a callback:
callback order is not guaranteed, and a refusal must neither hide a paid answer from the audit nor
leave a recorded request without its response.
"""
from __future__ import annotations

import threading
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig

BUDGET_KEY = "token_budget"


class TokenBudgetExceeded(RuntimeError):
    pass


class TokenBudget:
    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.calls = 0
        self._lock = threading.Lock()

    def check(self) -> None:
        with self._lock:
            if self.used >= self.limit:
                raise TokenBudgetExceeded(f"token budget of {self.limit} used up: {self.used} tokens in "
                                          f"{self.calls} LLM call(s); no further call is made")

    def charge(self, message: Any) -> None:
        usage = getattr(message, "usage_metadata", None) or {}
        with self._lock:
            self.used += int(usage.get("total_tokens", 0) or 0)
            self.calls += 1


def budget_of(config: RunnableConfig) -> Optional[TokenBudget]:
    return (config or {}).get("configurable", {}).get(BUDGET_KEY)
