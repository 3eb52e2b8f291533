"""The one table of the state machine: each state's name, where its contract sits in the graph state, the
contract it emits, the states it may hand off to, and the tools it may call.

Everything else derives from it: the graph builder adds one node per row with these destinations (the node
function registers itself by name, graph/machine/nodes/common.py), the contract keys, the JSON Schemas per state, the
tool allow-lists (the tools themselves are defined in agent/tools.py), the state order of replays and screens.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.analysis import QuantReport
from schemas.base import Contract
from schemas.debate import DebateReport
from schemas.decision import PortfolioDecision
from schemas.execution import ExecutionResult
from schemas.market import MarketScan
from schemas.memory import AgentMemory
from schemas.plan import Plan
from schemas.validation import DecisionValidation

END = "__end__"  # LangGraph's END; every state may end the cycle (fail closed)

MARKET_TOOLS = frozenset({"get_portfolio", "get_market_snapshot"})
QUANT_TOOLS = frozenset({"get_indicators", "get_price_history", "get_news_features"})
EXECUTION_TOOLS = frozenset({"submit_decision"})
NO_TOOLS: frozenset[str] = frozenset()


@dataclass(frozen=True)
class StateSpec:
    name: str
    key: str
    contract: type[Contract]
    destinations: tuple[str, ...]
    tools: frozenset[str]


STATE_TABLE: tuple[StateSpec, ...] = (
    StateSpec("SCANNING", "scan", MarketScan, ("PLANNING", END), MARKET_TOOLS),
    # none since pass protocol 3: its evidence holds what MARKET_TOOLS return (graph/machine/nodes/planning.py)
    StateSpec("PLANNING", "plan", Plan, ("ANALYZING", END), NO_TOOLS),
    StateSpec("ANALYZING", "quant", QuantReport, ("DEBATE", END), QUANT_TOOLS),
    StateSpec("DEBATE", "debate", DebateReport, ("DECIDING", END), NO_TOOLS),
    StateSpec("DECIDING", "decision", PortfolioDecision, ("VALIDATING", END), NO_TOOLS),
    # a failed validation goes straight to MEMORIZING: nothing executes
    StateSpec("VALIDATING", "validation", DecisionValidation, ("EXECUTING", "MEMORIZING", END), NO_TOOLS),
    StateSpec("EXECUTING", "execution", ExecutionResult, ("MEMORIZING", END), EXECUTION_TOOLS),
    StateSpec("MEMORIZING", "memory", AgentMemory, (END,), NO_TOOLS),
)

STATES: tuple[str, ...] = tuple(s.name for s in STATE_TABLE)
STATE_SPECS: dict[str, StateSpec] = {s.name: s for s in STATE_TABLE}
STATE_CONTRACTS: dict[str, type[Contract]] = {s.name: s.contract for s in STATE_TABLE}
CONTRACT_KEYS: dict[str, str] = {s.name: s.key for s in STATE_TABLE}
ALLOW_LISTS: dict[str, frozenset[str]] = {s.name: s.tools for s in STATE_TABLE}

# Allow-lists a state had under earlier pass protocols (agent/passes.py), where they differ from the table's:
# {state: (the protocol that retired them, tools)}. A replay runs a recording's passes as recorded, so a cycle
# recorded under protocol 1 or 2 needs PLANNING's tool pass over MARKET_TOOLS again. Kept beside the table, the one
# other place an allow-list is defined, and read only through `allow_list`.
RETIRED_ALLOW_LISTS: dict[str, tuple[int, frozenset[str]]] = {"PLANNING": (3, MARKET_TOOLS)}


def allow_list(state: str, protocol: int) -> frozenset[str]:
    """The tools `state` may call under pass `protocol`: the table's, or the retired list it had before."""
    retired = RETIRED_ALLOW_LISTS.get(state)
    if retired is not None and protocol < retired[0]:
        return retired[1]
    return ALLOW_LISTS[state]


def allow_lists(protocol: int) -> dict[str, frozenset[str]]:
    """Every state's allow-list under pass `protocol` (a run manifest records the one its cycle ran with)."""
    return {state: allow_list(state, protocol) for state in ALLOW_LISTS}
