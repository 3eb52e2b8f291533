"""Simulation contracts (seed 004): cases, episodes, agent invocations and the experiment logs.

Orders, decisions, fills and portfolios are the shared types of schemas.decision / schemas.portfolio,
so a backtest and a standalone cycle speak exactly the same language.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from schemas.base import Contract, IsoDate, NonNegMoney, Price, Symbol, unset
from schemas.decision import Decision, DecisionResult, ExecutedTrade, Order
from schemas.portfolio import DividendCredit, PortfolioSnapshot

# an episode's market profile (agent/markets.py) and which past notes its agents recall
Market = Literal["us_equity", "cn_a_share", "crypto"]
MemoryMode = Literal["on", "off", "session"]
# what a decision point did: traded, held, had its decision refused, or its cycle failed
PointAction = Literal["trade", "hold", "rejected", "failed"]

SIMULATION_VERSION = "1.0"
CASE_ID_PATTERN = r"^.+:\d+$"

__all__ = [
    "PricePoint",
    "IntervalPriceSummary",
    "CaseDataItem",
    "CaseData",
    "StockData",
    "CaseMetadata",
    "Case",
    "EpisodeConfig",
    "EquityPoint",
    "TradeHistory",
    "EpisodeResult",
    "AgentInvocation",
    "AgentInvocationResult",
    "DecisionPointLog",
    "EpisodeLog",
    "SimulationLog",
    "Order",
    "Decision",
    "ExecutedTrade",
    "DecisionResult",
    "PortfolioSnapshot",
    "SIMULATION_VERSION",
]


# ---------------------------------------------------------------- case.py
class PricePoint(Contract):
    """One day's OHLCV bar."""

    timestamp: IsoDate
    open: Price
    high: Price
    low: Price
    close: Price
    volume: float = Field(ge=0)


class IntervalPriceSummary(Contract):
    """Open/high/low/close/volume over the interval since the previous decision point (lighter payload)."""

    start: IsoDate
    end: IsoDate
    open: Price
    high: Price
    low: Price
    close: Price
    volume: float = Field(ge=0)


class CaseDataItem(Contract):
    kind: Literal["earnings", "news", "other"]
    content: str = Field(max_length=4000)
    timestamp: Optional[IsoDate] = None


class CaseData(Contract):
    items: list[CaseDataItem] = Field(default_factory=list)


class StockData(Contract):
    ticker: Symbol
    current_price: Price
    daily_bars: list[PricePoint] = Field(default_factory=list)
    interval_summary: Optional[IntervalPriceSummary] = None


class CaseMetadata(Contract):
    decision_point_idx: int = Field(ge=0)
    information_cutoff_timestamp: IsoDate


class Case(Contract):
    """What the agent decides on. `metadata` is stored with the case but never shown to the agent.

    `tickers` are the ones that can trade at this decision point; a listed ticker with no bar that day is in
    `untradable` with the reason instead (and in an item of `case_data`, which the planner reads), never traded at
    a stale price."""

    case_id: str = Field(pattern=CASE_ID_PATTERN, max_length=300)
    tickers: list[Symbol] = Field(min_length=1)
    case_data: CaseData = Field(default_factory=CaseData)
    stock_data: dict[Symbol, StockData]
    portfolio: PortfolioSnapshot
    metadata: CaseMetadata
    untradable: dict[Symbol, str] = Field(default_factory=dict, exclude_if=unset)

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        missing = [t for t in self.tickers if t not in self.stock_data]
        if missing:
            raise ValueError(f"no stock_data for ticker(s) {', '.join(missing)}")
        cutoff = self.metadata.information_cutoff_timestamp
        for t, sd in self.stock_data.items():
            late = [b.timestamp for b in sd.daily_bars if b.timestamp > cutoff]
            if late:
                raise ValueError(f"{t}: bar {late[0]} is after the information cutoff {cutoff}")
        return self

    def for_agent(self) -> dict[str, Any]:
        """The agent-facing payload: everything but the metadata."""
        return self.model_dump(mode="json", exclude={"metadata"})


# ---------------------------------------------------------------- episode.py
class EpisodeConfig(Contract):
    episode_id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")
    agent_id: str = Field(default="tradegraph", min_length=1, max_length=200)
    tickers: list[Symbol] = Field(min_length=1)
    initial_cash: float = Field(gt=0, lt=1e12)
    start: IsoDate
    end: IsoDate
    every: int = Field(default=1, ge=1, le=260)
    fees_bps: float = Field(default=1.0, ge=0, le=1000)
    slippage_bps: float = Field(default=2.0, ge=0, le=1000)
    market: Market = "us_equity"
    bars_in_case: int = Field(default=20, ge=1, le=260)
    risk_free_rate: float = Field(default=0.0, ge=-1, le=1)
    # past notes the agents recall: session (this run's only, the default: a rerun is independent of other
    # runs), on (every run's, known before each date), off
    memory: MemoryMode = "session"
    # when each decision point decides: at its close (on its whole bar, filled and marked at the close) or at its
    # open (StockBench: on the bars through the previous close and the day's opening price, filled and marked at
    # the open). Not written while it is the default, so a run's config.json reads as before
    decide_at: Literal["close", "open"] = Field(default="close", exclude_if=lambda v: v == "close")

    @model_validator(mode="after")
    def _dates(self) -> EpisodeConfig:
        if self.start > self.end:
            raise ValueError(f"start {self.start} is after end {self.end}")
        if len(set(self.tickers)) != len(self.tickers):
            raise ValueError("duplicate ticker")
        return self


class EquityPoint(Contract):
    date: IsoDate
    equity: float
    cash: NonNegMoney
    exposure: float = Field(ge=0)


class TradeHistory(Contract):
    trades: list[ExecutedTrade] = Field(default_factory=list)


class EpisodeResult(Contract):
    episode_id: str
    decision_points: int = Field(ge=0)
    trade_history: TradeHistory
    final_portfolio: PortfolioSnapshot
    equity_curve: list[EquityPoint] = Field(default_factory=list)
    benchmark_curve: list[EquityPoint] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    benchmark_metrics: dict[str, Any] = Field(default_factory=dict)
    # what the benchmark is: {"kind", "tickers", "weights", "initial_cash", "fees_bps", "rebalanced"}
    benchmark: dict[str, Any] = Field(default_factory=dict)
    # decision points per action (trade/hold/rejected/failed) and per cycle status (completed/failed/degraded/…)
    actions: dict[str, int] = Field(default_factory=dict)
    cycle_statuses: dict[str, int] = Field(default_factory=dict)
    # every decision point whose cycle failed or degraded: {idx, date, status, error}
    failed_points: list[dict[str, Any]] = Field(default_factory=list)
    # every closing sell by its reason: stop, target, horizon (closed on its levels) or signal (a decision)
    exits: dict[str, int] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    # the run's LLM tokens and US dollars, in total and by state (agent/pricing.py Spend); usd leaves out the
    # unknown_cost_calls (models without a price)
    llm_cost: dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------- agents.py
class AgentInvocation(Contract):
    case: Case
    episode_id: str
    agent_id: str
    steps_remaining: Optional[int] = Field(default=None, ge=0)


class AgentInvocationResult(Contract):
    decision: Decision
    submit_calls: int = Field(default=0, ge=0)
    cycle_id: Optional[str] = None
    cycle_status: Optional[str] = None


# ---------------------------------------------------------------- experiment.py
class DecisionPointLog(Contract):
    case_id: str = Field(pattern=CASE_ID_PATTERN)
    decision_point_idx: int = Field(ge=0)
    date: IsoDate
    # failed: the cycle failed or degraded (no decision was made); never counted as a hold
    action: PointAction
    agent_output: dict[str, Any] = Field(default_factory=dict)
    extracted_decision: Decision
    execution_result: DecisionResult
    # positions closed on their stop, target or horizon before the cycle decided (in the bars since the last point)
    exits: list[ExecutedTrade] = Field(default_factory=list)
    # cash dividends credited before the cycle decided (ex-dates since the last point)
    dividends: list[DividendCredit] = Field(default_factory=list, exclude_if=unset)
    portfolio_before: PortfolioSnapshot
    portfolio_after: PortfolioSnapshot
    prices: dict[Symbol, float]
    equity: float
    steps_remaining: int = Field(ge=0)


class EpisodeLog(Contract):
    config: EpisodeConfig
    decision_point_logs: list[DecisionPointLog] = Field(default_factory=list)
    episode_result: Optional[EpisodeResult] = None


class SimulationLog(Contract):
    run_id: str
    episode_logs: list[EpisodeLog] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    simulation_version: Optional[str] = SIMULATION_VERSION
    agent_version: Optional[str] = None
    evaluation_version: Optional[str] = None
