"""What a cycle runs with: configuration, data sources, models, the execution backend, and what one run adds to them
(its audit writer, budget, response cache, recall).

All of it travels as the run's one context (`CycleContext`, the graph's `context_schema`: `invoke(..., context=...)`,
langchain-ai/react-agent's pattern), handed by LangGraph to each node as `runtime: Runtime[CycleContext]`; a run
without one (LangGraph Studio) gets the defaults built from the environment (`context_of`). The agent layer below
cannot see the graph's context: a node hands the agent functions it calls a `CallContext` (`CycleContext.call`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime, get_runtime

from agent import model_profiles
from agent.budget import Budget, process_budget
from agent.cache import ResponseCache, process_cache
from agent.call_context import CallContext
from agent.config import AgentConfig
from agent.data.fundamentals import FundamentalsSource, default_fundamentals
from agent.data.market import MarketData, default_market_data
from agent.data.news import NewsSource, default_news
from agent.data.sources import DataFiles, load_sources
from agent.dividends import DividendSource
from agent.features.bundle import default_cache
from agent.features.technical import IndicatorCache
from agent.llm import make_model
from agent.markets import MarketProfile, get_profile
from agent.memory.recall import Recall
from agent.protocols import PASS_PROTOCOL, version
from agent.tools import ToolContext
from database.embedded import resolve_home
from graph.machine.approval import Approver, AskHuman, RecordedApproval
from graph.machine.market_source import LiveMarket, MarketSource, RecordedMarket
from schemas.decision import Decision, DecisionResult, ExecutedTrade
from schemas.features import FeatureBundle
from schemas.memory import ClosedTrade
from schemas.portfolio import DividendCredit, PortfolioSnapshot

# `tradegraph models check` keeps endpoint profiles in the store's home (the agent layer can't import database)
model_profiles.install_home(lambda: resolve_home().path)


class ExecutionBackend(Protocol):
    """Where EXECUTING's submit_decision lands: the paper broker with a store, or a backtest's simulation."""

    def lookup(self, cycle_id: str) -> Optional[dict]: ...

    def execute(
        self,
        decision: Decision,
        *,
        cycle_id: str,
        session_id: str,
        universe: list[str],
        prices: dict[str, float],
        prev_closes: dict[str, float],
        portfolio: PortfolioSnapshot,
        as_of: str,
    ) -> tuple[DecisionResult, PortfolioSnapshot]: ...

    def version(self, session_id: str) -> Optional[int]:
        """The stored portfolio's version, or None where there is nothing to compare (a simulation)."""

    def record(self, cycle_id: str, session_id: str, result: dict, *, base_version: Optional[int] = None) -> bool: ...

    def settle_exits(
        self,
        cycle_id: str,
        session_id: str,
        *,
        closed: list[ClosedTrade],
        trades: list[ExecutedTrade],
        portfolio_after: PortfolioSnapshot,
        base_version: Optional[int],
        dividends: Sequence[DividendCredit] = (),
    ) -> Optional[int]:
        """Commit what SCANNING settled before the decision: the positions it closed on their levels and the
        dividends it credited; returns the portfolio's new version (None where there is no stored portfolio). A
        portfolio that moved on raises PortfolioConflict."""


@dataclass
class CycleServices:
    config: AgentConfig
    market: MarketData
    news: NewsSource
    fundamentals: FundamentalsSource
    cache: IndicatorCache
    execution: Optional[ExecutionBackend] = None
    model_factory: Callable[..., BaseChatModel] = make_model  # (config, tier)
    # where SCANNING reads the market (today's data, or a replay's recording) and who answers an approval request
    # (a human, or a replay's recorded decision): graph/machine/market_source.py, graph/machine/approval.py
    source: MarketSource = field(default_factory=LiveMarket)
    approver: Approver = field(default_factory=AskHuman)
    # the memory bank MEMORIZING writes to and agents recall from (graph/machine/memory.py); None in a replay
    memory: Optional[Any] = None
    # what memories are tagged with besides the session: a backtest's run id
    run_id: Optional[str] = None
    # a recall given outright (a replay's: the recorded hits instead of a search); else the memory bank's
    recall: Optional[Recall] = None
    # where provider answers are cached (agent/cache.py ResponseCache; the store's llm_cache collection); None in
    # a replay, which answers from its recording alone
    llm_cache: Optional[Any] = None
    # a budget shared by every cycle run with these services (agent/budget.py Budget: a backtest's, per run); None:
    # each cycle gets its own from the configuration
    budget: Optional[Any] = None
    # corporate actions (agent/dividends.py DividendSource): held positions are credited their cash dividends on
    # the ex-date; None (the bundled data) credits nothing
    actions: Optional[DividendSource] = None
    # the pass protocol the cycle runs (agent/protocols.py): today's, or a recording's in a replay; the manifest
    # records it
    protocol: int = PASS_PROTOCOL
    _models: dict[str, BaseChatModel] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def model(self, tier: str = "quick") -> BaseChatModel:
        with self._lock:
            if tier not in self._models:
                self._models[tier] = self.model_factory(self.config, tier)
            return self._models[tier]

    @property
    def profile(self) -> MarketProfile:
        """The market profile deciding at the configured time: every time and price rule of a cycle reads it
        (which bars are whole, what is published, the price orders fill at)."""
        return get_profile(self.config.market, self.config.decide_at)

    def bundle(self, symbol: str, as_of: str) -> FeatureBundle:
        return self.source.bundle(self, symbol, as_of)


class AuditWriter(Protocol):
    """The cycle's audit writer (database/writer.py BufferedEventWriter): what the durability barrier flushes."""

    def put(self, event: dict[str, Any]) -> None: ...

    def flush(self, *, durable: bool = False) -> None: ...


_UNSET: Any = object()  # CycleContext() given no services


@dataclass
class CycleContext:
    """The graph's `context_schema`: everything a run is given besides its input, built once per cycle by the
    runner (graph/machine/runner.py cycle_run_config, which replay calls too) and handed to each node by LangGraph
    (`runtime: Runtime[CycleContext]`). A LangGraph Studio server, which can only send JSON, hands over nothing:
    its runs get one on the process's default services, with the process's budgets and cache (`context_of`)."""

    # a LangGraph API server (Studio) builds the context from the JSON it was sent, which cannot hold the services:
    # `CycleContext()` then runs on the process's default services (context_of adds the process's budget and cache);
    # a context tradegraph builds always names its services, and its None budget or cache means none
    services: CycleServices = _UNSET
    # the cycle's audit writer: SCANNING's settlements and EXECUTING wait on it (the durability barrier); None
    # for a Studio run, whose events the server's handler writes through
    audit_writer: Optional[AuditWriter] = None
    # the cycle's budget (a backtest's is shared by its cycles) and response cache, None for none; what agents
    # recall from, None with memory off
    budget: Optional[Budget] = None
    cache: Optional[ResponseCache] = None
    recall: Optional[Recall] = None

    from_nothing: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.services is _UNSET:
            self.services, self.from_nothing = process_services(), True

    def call(self, tools: Optional[ToolContext] = None) -> CallContext:
        """What the agent functions a node calls run with (agent/call_context.py), handed to them as an argument."""
        return CallContext(
            protocol=version(self.services.protocol),
            tools=tools,
            cache=self.cache,
            budget=self.budget,
            recall=self.recall,
        )

    def audit_barrier(self) -> None:
        """Return only once every audit event of the cycle so far is acknowledged by the store.
        Raises (AuditSpooled, StoreUnavailable, …) if it cannot be: the caller fails closed."""
        if self.audit_writer is not None:
            self.audit_writer.flush(durable=True)


def default_services(
    config: Optional[AgentConfig] = None,
    execution: Optional[ExecutionBackend] = None,
    data: Optional[DataFiles] = None,
    **overrides: Any,
) -> CycleServices:
    """`data` names a user's own files (read here, once per file version); what it leaves out, and no source
    given in `overrides`, is the bundled sample. A replay hands what it recorded (`recorded_scan` with
    `bundle_source`, `recorded_approval`, `recorded_recall`): installed as the recorded sources."""
    recorded_scan, bundles = overrides.pop("recorded_scan", None), overrides.pop("bundle_source", None)
    if recorded_scan is not None and bundles is not None:
        overrides["source"] = RecordedMarket(recorded_scan, bundles)
    if (approval := overrides.pop("recorded_approval", None)) is not None:
        overrides["approver"] = RecordedApproval(approval)
    if (recall := overrides.pop("recorded_recall", None)) is not None:
        overrides["recall"] = recall
    sources = load_sources(data)
    for attr in ("market", "news", "fundamentals", "actions"):  # a source object given outright wins over a file
        given = overrides.pop(attr, None)
        if given is not None:
            sources[attr] = given
    return CycleServices(
        config=config or AgentConfig.from_env(),
        market=sources.get("market") or default_market_data(),
        news=sources.get("news") or default_news(),
        fundamentals=sources.get("fundamentals") or default_fundamentals(),
        actions=sources.get("actions"),
        cache=overrides.pop("cache", None) or default_cache(),
        execution=execution,
        **overrides,
    )


_default: Optional[CycleServices] = None
_default_lock = threading.Lock()


def set_default_services(rt: CycleServices) -> None:
    """The services for runs whose config carries none (a LangGraph Studio server's runs)."""
    global _default
    from agent.budget import install_process_budgets
    from agent.cache import install_process_cache

    with _default_lock:
        _default = rt
    # such runs carry no budget or cache in their config: the process's configuration ($TRADEGRAPH_MAX_TOKENS,
    # _MAX_COST, _MAX_LLM_CALLS, $TRADEGRAPH_LLM_CACHE) and the store its execution writes to provide them
    install_process_budgets(rt.config)
    store = rt.llm_cache or getattr(getattr(rt.execution, "store", None), "llm_cache", None)
    install_process_cache(store if rt.config.llm_cache else None)


def context_of(runtime: Optional[Runtime[CycleContext]], config: Optional[RunnableConfig] = None) -> CycleContext:
    """The context LangGraph hands a node (`runtime.context`: the runner's or a replay's). A run started without
    one (a LangGraph Studio server, which can only send JSON) gets one on the process's default services built from
    the environment, with the process's budget for its cycle and cache (set_default_services installs them)."""
    context = runtime.context if runtime is not None else None
    cycle_id = ((config or {}).get("configurable") or {}).get("cycle_id")
    if isinstance(context, CycleContext):
        if context.from_nothing:
            return replace(context, budget=process_budget(cycle_id), cache=process_cache(cycle_id))
        return context
    return CycleContext(process_services(), budget=process_budget(cycle_id), cache=process_cache(cycle_id))


def process_services() -> CycleServices:
    """The process's default services (set_default_services's, else one built from the environment)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = default_services()
        return _default


def run_context() -> CycleContext:
    """The run's context fetched from LangGraph's run (get_runtime), for code that no node hands it to: the broker
    backend's audit writer (graph/machine/broker/execution.py). Nodes are handed theirs (`context_of`)."""
    try:
        return context_of(get_runtime(CycleContext))
    except RuntimeError:  # called outside a graph run
        return context_of(None)
