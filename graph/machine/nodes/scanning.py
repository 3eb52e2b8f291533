"""SCANNING: validated inputs → point-in-time snapshots with their FeatureBundles (no LLM).

What a cycle dated D may know depends on its profile's decision time (agent/markets.py): at the close, D's whole
bar, and it fills at D's close; at the open, the bars through the session before and D's opening price, which it
sizes, checks and fills at. Before anything is decided, held positions are paid the dividends whose ex-date came
and closed on the levels the bars since their last check reached, both committed through the execution backend.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.features.bundle import round_value
from agent.tools import ToolContext, invoke_tool
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import done, state_node
from graph.machine.state import CycleState
from schemas.market import MarketScan, MarketSnapshot
from schemas.portfolio import PortfolioSnapshot


@state_node("SCANNING")
def scanning(
    state: CycleState, config: RunnableConfig, context: CycleContext
) -> Command[Literal["PLANNING", "__end__"]]:
    rt = context.services
    symbols, as_of = list(state["symbols"]), state["as_of"]
    # today's data, or in a replay the recording (graph/machine/market_source.py): the node asks either the same
    rt.source.check_as_of(rt, symbols, as_of)
    portfolio = PortfolioSnapshot.model_validate(state.get("portfolio") or {"cash": rt.config.starting_cash})
    # before anything else: dividends whose ex-date came, and positions whose stop, target or horizon the bars
    # since the last check reached
    ids = _ids(state, config)
    exits, dividends, portfolio, settled = rt.source.settle(context, {**state, **ids}, portfolio, config)
    ctx = ToolContext(as_of=as_of, universe=symbols, portfolio=portfolio, bundle_factory=lambda s: rt.bundle(s, as_of))
    # the scan reads the market through the registered tools, so its data access is audited like any other
    invoke_tool("get_portfolio", {}, state="SCANNING", config=config, context=ctx)
    invoke_tool("get_market_snapshot", {"symbols": symbols}, state="SCANNING", config=config, context=ctx)
    snapshots = [snapshot_of(s, ctx.bundle(s), as_of) for s in symbols]
    if state.get("case"):
        check_case(state["case"], symbols, snapshots)
    marks, untradable = rt.source.marks(rt, dict(state), portfolio, symbols, as_of)
    scan = MarketScan(
        as_of=as_of,
        universe=symbols,
        snapshots=snapshots,
        portfolio=portfolio,
        marks=marks,
        exits=exits,
        dividends=dividends,
        untradable=untradable,
    )
    return done("SCANNING", scan, "PLANNING", config, **ids, **settled)


def snapshot_of(symbol: str, b, as_of: str) -> MarketSnapshot:
    """The decision's price: the bundle's last close at the close; at the open, as_of's opening price, with the
    last close (the session before) as the previous close."""
    last = b.history[-1] if b.history else None
    if b.open_price is not None:
        return MarketSnapshot(
            symbol=symbol,
            as_of=as_of,
            last_bar_date=last.date if last else b.as_of,
            price=b.open_price,
            prev_close=b.technical.close,
            volume=b.technical.volume or 0.0,
            bundle=b,
        )
    return MarketSnapshot(
        symbol=symbol,
        as_of=as_of,
        last_bar_date=last.date if last else b.as_of,
        price=b.technical.close,
        prev_close=b.technical.prev_close,
        volume=b.technical.volume or 0.0,
        bundle=b,
    )


def check_case(case: dict, symbols: list[str], snapshots: list[MarketSnapshot]) -> None:
    """In a backtest the Case is the given data: the scan must agree with it, or the cycle fails closed."""
    if sorted(case.get("tickers", [])) != sorted(symbols):
        raise ValueError(f"case tickers {case.get('tickers')} differ from the cycle's symbols {symbols}")
    for snap in snapshots:
        given = case["stock_data"][snap.symbol]["current_price"]
        if round_value(given) != snap.price:  # bundles carry prices at a fixed precision
            raise ValueError(
                f"case price {given} for {snap.symbol} differs from the point-in-time price "
                f"{snap.price} on {snap.as_of}"
            )


def _ids(state: CycleState, config: RunnableConfig) -> dict:
    """A run started outside the runner (LangGraph Studio) names its session and cycle in the config."""
    conf = (config or {}).get("configurable", {})
    ids = {}
    for key in ("session_id", "cycle_id"):
        if not state.get(key):
            if not conf.get(key):
                raise ValueError(f"no {key} in the input or the run config")
            ids[key] = conf[key]
    return ids
