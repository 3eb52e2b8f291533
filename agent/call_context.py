"""What one agent call runs with, handed down explicitly by the node that makes it.

The graph's run context (graph/machine/cycle_context.py CycleContext) sits above the agent layer, which cannot import it:
each node hands the agent functions it calls one `CallContext`, a small typed object, as an argument. Tools get
their part (the ToolContext) as an injected argument (LangChain's InjectedToolArg: never shown to the model); the
config they are handed carries LangChain's own (callbacks, metadata) and nothing of the run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from agent.protocols import CURRENT, PassProtocol
from agent.tools import ToolContext

if TYPE_CHECKING:
    from agent.budget import Budget
    from agent.cache import ResponseCache
    from agent.memory.recall import Recall


@dataclass(frozen=True)
class CallContext:
    """`protocol`: the pass protocol the passes run under (a replay's is the recorded one); `tools`: the cycle's
    tool context (as-of date, universe, portfolio, executor), None outside a cycle; `cache`, `budget`, `recall`:
    the cycle's response cache, budget and memory recall, None for none (a replay has no cache; memory off)."""

    protocol: PassProtocol = CURRENT
    tools: Optional[ToolContext] = None
    cache: Optional[ResponseCache] = None
    budget: Optional[Budget] = None
    recall: Optional[Recall] = None

    @property
    def universe(self) -> tuple[str, ...]:
        """The cycle's universe (none outside a cycle): the guards refuse a contract naming another symbol."""
        return tuple(self.tools.universe) if self.tools is not None else ()


# a pass called outside a cycle (a test, a bench script): today's protocol, no tools, no budget, cache or recall
OUTSIDE_A_CYCLE = CallContext()
