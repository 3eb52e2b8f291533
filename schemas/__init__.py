"""The Pydantic contracts. This package imports nothing else of ours."""
from schemas.analysis import AnalystNote, QuantAnswer, QuantReport, SymbolPanel
from schemas.base import SCHEMA_VERSION
from schemas.debate import DebateCase, DebateReport, DebateResult, ManagerVerdict
from schemas.decision import Decision, DecisionResult, ExecutedTrade, Order, PortfolioDecision, TradeThesis
from schemas.events import StateEvent
from schemas.execution import ExecutionResult
from schemas.features import FeatureBundle, PriceBar
from schemas.market import MarketScan, MarketSnapshot
from schemas.memory import AgentMemory, ClosedTrade, MemoryRecord, RetrievalHit, TradeReview
from schemas.plan import Plan
from schemas.portfolio import PortfolioSnapshot, Position
from schemas.validation import DecisionValidation, RiskCheck

from schemas.states import STATE_CONTRACTS, STATES

# every model whose JSON Schema `tradegraph schemas` writes
ALL_CONTRACTS = {
    m.__name__: m
    for m in (
        MarketScan, MarketSnapshot, PriceBar, FeatureBundle, PortfolioSnapshot, Position, Plan, AnalystNote,
        QuantAnswer, SymbolPanel, QuantReport, DebateCase, ManagerVerdict, DebateResult, DebateReport,
        TradeThesis, Order, Decision, PortfolioDecision, ExecutedTrade, DecisionResult, DecisionValidation,
        RiskCheck, ExecutionResult, AgentMemory, ClosedTrade, TradeReview, MemoryRecord, RetrievalHit, StateEvent,
    )
}

__all__ = [*ALL_CONTRACTS, "STATE_CONTRACTS", "ALL_CONTRACTS", "SCHEMA_VERSION", "STATES"]
