"""The Pydantic contracts. This package imports nothing else of ours.

Importing one contract module (`from schemas.base import …`) loads that module alone: the names below load their
module when first asked for (PEP 562), so a command that reads only sessions does not build every contract's
Pydantic model (issue 29: `sessions` and `portfolio` answer in about a second)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the one name read from the package itself (the rest: from their modules); typed here
    from pydantic import BaseModel

    ALL_CONTRACTS: dict[str, type[BaseModel]]

# every model whose JSON Schema `tradegraph schemas` writes, in its order, and the module that defines it
_CONTRACTS = {
    "MarketScan": "market",
    "MarketSnapshot": "market",
    "PriceBar": "features",
    "FeatureBundle": "features",
    "PortfolioSnapshot": "portfolio",
    "Position": "portfolio",
    "Plan": "plan",
    "AnalystNote": "analysis",
    "QuantAnswer": "analysis",
    "SymbolPanel": "analysis",
    "QuantReport": "analysis",
    "DebateCase": "debate",
    "ManagerVerdict": "debate",
    "DebateResult": "debate",
    "DebateReport": "debate",
    "TradeThesis": "decision",
    "Order": "decision",
    "Decision": "decision",
    "PortfolioDecision": "decision",
    "ExecutedTrade": "decision",
    "DecisionResult": "decision",
    "DecisionValidation": "validation",
    "RiskCheck": "validation",
    "ExecutionResult": "execution",
    "AgentMemory": "memory",
    "ClosedTrade": "memory",
    "TradeReview": "memory",
    "MemoryRecord": "memory",
    "RetrievalHit": "memory",
    "StateEvent": "events",
}
_HOME = {**_CONTRACTS, "SCHEMA_VERSION": "base", "STATE_CONTRACTS": "states", "STATES": "states"}


def __getattr__(name: str) -> Any:
    if name == "ALL_CONTRACTS":
        value: Any = {n: __getattr__(n) for n in _CONTRACTS}
    elif name in _HOME:
        value = getattr(importlib.import_module(f"schemas.{_HOME[name]}"), name)
    else:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    globals()[name] = value  # asked once
    return value


__all__ = [*_CONTRACTS, "STATE_CONTRACTS", "ALL_CONTRACTS", "SCHEMA_VERSION", "STATES"]
