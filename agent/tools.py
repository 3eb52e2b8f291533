"""The tools, registered once, and each state's allow-list.

A tool reads its cycle's context (as-of date, universe, portfolio, data sources, executor) from its `context`
argument, which its caller injects (LangChain's InjectedToolArg: left out of the schema the model is sent), so the
same registered object serves the graph, the CLI and the tests, and no tool can see past the cycle's as-of date.
"""

from __future__ import annotations

import inspect
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool, tool
from pydantic import BaseModel, Field, SkipValidation

from agent.fence import fence
from schemas.base import MAX_SYMBOLS
from schemas.decision import Decision, DecisionResult, Order
from schemas.features import FeatureBundle, NewsFeatures
from schemas.portfolio import PortfolioSnapshot

# which tools each state may call is a column of the state table (schemas/states.py)
from schemas.states import ALLOW_LISTS, allow_list, allow_lists  # noqa: F401 - a state's list under a pass protocol

HISTORY_MAX = 20


class ToolError(RuntimeError):
    pass


@dataclass
class ToolContext:
    as_of: str
    universe: list[str]
    portfolio: PortfolioSnapshot
    bundle_factory: Callable[[str], FeatureBundle]
    executor: Optional[Callable[[Decision], DecisionResult]] = None
    _bundles: dict[str, FeatureBundle] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bundle(self, symbol: str) -> FeatureBundle:
        if symbol not in self.universe:
            raise ToolError(f"symbol {symbol!r} is not in this cycle's universe ({', '.join(self.universe)})")
        with self._lock:
            if symbol not in self._bundles:
                self._bundles[symbol] = self.bundle_factory(symbol)
            return self._bundles[symbol]


# the argument every tool's caller injects (agent/passes.py _run_tool, invoke_tool below); the model never sees it
Injected = Annotated[Optional[ToolContext], InjectedToolArg, SkipValidation]


def context_of(context: Optional[ToolContext]) -> ToolContext:
    if context is None:
        raise ToolError("no tool context was given; tools run only inside a cycle")
    return context


SNAPSHOT_FIELDS = ("close", "prev_close", "volume", "rsi14", "sma50", "sma200", "atr14")


@tool
def get_portfolio(context: Injected = None) -> dict:
    """Return the current portfolio: cash and open positions."""
    return portfolio_record(context_of(context).portfolio)


def portfolio_record(portfolio: PortfolioSnapshot) -> dict:
    """`get_portfolio`'s answer; PLANNING's evidence carries the same (no tool pass)."""
    return portfolio.model_dump(mode="json")


class SnapshotArgs(BaseModel):
    symbols: list[str] = Field(description="symbols of this cycle's universe", min_length=1, max_length=MAX_SYMBOLS)


@tool(args_schema=SnapshotArgs)
def get_market_snapshot(symbols: list[str], context: Injected = None) -> list[dict]:
    """Return last close, previous close, volume and headline indicators for each symbol as of the cycle date."""
    ctx = context_of(context)
    return [snapshot_row(s, ctx.bundle(s)) for s in symbols]


def snapshot_row(symbol: str, bundle: FeatureBundle) -> dict:
    """One symbol of `get_market_snapshot`'s answer; PLANNING's evidence carries the same rows (no tool pass).
    Deciding at the open, `close` is the last whole bar's (the session before) and `open` the day's opening
    price, the one the orders fill at."""
    t = bundle.technical.model_dump()
    row = {"symbol": symbol, "as_of": bundle.as_of, **{k: t[k] for k in SNAPSHOT_FIELDS}}
    if bundle.open_price is not None:
        row["open"] = bundle.open_price
    if bundle.missing_sessions:
        row["missing_sessions"] = list(bundle.missing_sessions)
    return row


class IndicatorArgs(BaseModel):
    symbol: str
    names: list[str] = Field(description="indicator names, e.g. rsi14, macd_hist, sma50, atr14", min_length=1)


@tool(args_schema=IndicatorArgs)
def get_indicators(symbol: str, names: list[str], context: Injected = None) -> dict:
    """Return computed indicator values for one symbol as of the cycle date (null while in warm-up)."""
    tech = context_of(context).bundle(symbol).technical.model_dump()
    unknown = [n for n in names if n not in tech]
    if unknown:
        raise ToolError(f"unknown indicator(s) {', '.join(unknown)}; known: {', '.join(sorted(tech))}")
    return {n: tech[n] for n in names}


class SymbolArgs(BaseModel):
    symbol: str


@tool(args_schema=SymbolArgs)
def get_news_features(symbol: str, context: Injected = None) -> dict:
    """Return the symbol's news features (event class, recency weight, sentiment); headlines are fenced data."""
    news: NewsFeatures = context_of(context).bundle(symbol).news
    data = news.model_dump(mode="json")
    for item in data["items"]:
        item["headline"] = fence(item["headline"])
    return data


class HistoryArgs(BaseModel):
    symbol: str
    lookback: int = Field(default=10, ge=1, le=HISTORY_MAX)


@tool(args_schema=HistoryArgs)
def get_price_history(symbol: str, lookback: int, context: Injected = None) -> list[dict]:
    """Return the last `lookback` daily bars (split-adjusted) up to the cycle date."""
    history = context_of(context).bundle(symbol).history
    return [bar.model_dump(mode="json") for bar in history[-lookback:]]


class SubmitArgs(Decision):
    """Decision's fields, plus the injected context: Decision forbids extra fields, so the context is declared
    (as Any: a ToolContext holds a lock, which a pydantic field cannot describe; the function's parameter is typed)."""

    context: Annotated[Any, InjectedToolArg] = None


@tool(args_schema=SubmitArgs)
def submit_decision(orders: list[Order], context: Injected = None) -> dict:
    """Submit the validated decision for all-or-nothing execution; returns the DecisionResult."""
    ctx = context_of(context)
    if ctx.executor is None:
        raise ToolError("no executor is wired for this cycle")
    decision = Decision(orders=[o if isinstance(o, Order) else Order.model_validate(o) for o in orders])
    return ctx.executor(decision).model_dump(mode="json")


TOOLS: dict[str, BaseTool] = {
    t.name: t
    for t in (get_portfolio, get_market_snapshot, get_indicators, get_news_features, get_price_history, submit_decision)
}


def _annotations_resolved(t: BaseTool) -> None:
    """LangChain resolves a tool function's type hints on every call (to find its RunnableConfig parameter): with
    this module's postponed annotations that is an eval of each one each time. Resolved once here, to the same
    types (Annotated metadata kept), so each call reads them as they are."""
    if not isinstance(t, StructuredTool) or t.func is None:
        raise TypeError(f"tool {t.name} is not made from a function by @tool")
    func: Any = t.func
    func.__annotations__ = typing.get_type_hints(func, include_extras=True)
    func.__signature__ = inspect.signature(func)


for _tool in TOOLS.values():
    _annotations_resolved(_tool)


def invoke_tool(name: str, args: dict[str, Any], *, state: str, config: RunnableConfig, context: ToolContext) -> Any:
    """Code-driven tool call (SCANNING, EXECUTING): same registry, same allow-list, same audit."""
    if name not in ALLOW_LISTS[state]:
        raise ToolError(f"tool {name!r} is not allowed in state {state}")
    return TOOLS[name].invoke(with_context(args, context), config)


def with_context(args: dict[str, Any], context: Optional[ToolContext]) -> dict[str, Any]:
    """A tool's arguments plus the injected context (the audit's callbacks see the arguments alone)."""
    return {**args, "context": context} if context is not None else dict(args)
