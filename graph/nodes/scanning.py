"""SCANNING: validated inputs → point-in-time snapshots with their FeatureBundles (no LLM)."""
from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.data.market import validate_as_of
from agent.features.bundle import round_value
from agent.audit_events import emit
from agent.exits import apply_exits, due_exits
from agent.markets import get_profile
from agent.tools import ToolContext, invoke_tool
from graph.nodes.common import done, state_node
from graph.runtime import audit_barrier, runtime_of, with_tools
from graph.state import CycleState
from schemas.market import MarketScan, MarketSnapshot
from schemas.memory import ClosedTrade
from schemas.portfolio import PortfolioSnapshot


@state_node("SCANNING")
def scanning(state: CycleState, config: RunnableConfig) -> Command[Literal["PLANNING", "__end__"]]:
    rt = runtime_of(config)
    symbols, as_of = list(state["symbols"]), state["as_of"]
    if rt.recorded_scan is None:  # a replay re-reads the recording, not today's (maybe deleted) files
        validate_as_of(rt.market, symbols, as_of, rt.config.market)
    portfolio = PortfolioSnapshot.model_validate(state.get("portfolio") or {"cash": rt.config.starting_cash})
    # before anything else: positions whose stop, target or horizon the bars since the last check reached
    ids = _ids(state, config)
    exits, portfolio, settled = close_on_levels(rt, {**state, **ids}, portfolio, config)
    ctx = ToolContext(as_of=as_of, universe=symbols, portfolio=portfolio,
                      bundle_factory=lambda s: rt.bundle(s, as_of))
    tool_config = with_tools(config, ctx)
    # the scan reads the market through the registered tools, so its data access is audited like any other
    invoke_tool("get_portfolio", {}, state="SCANNING", config=tool_config)
    invoke_tool("get_market_snapshot", {"symbols": symbols}, state="SCANNING", config=tool_config)
    snapshots = []
    for s in symbols:
        b = ctx.bundle(s)
        last = b.history[-1] if b.history else None
        snapshots.append(MarketSnapshot(symbol=s, as_of=as_of, last_bar_date=last.date if last else b.as_of,
                                        price=b.technical.close, prev_close=b.technical.prev_close,
                                        volume=b.technical.volume or 0.0, bundle=b))
    if state.get("case"):
        check_case(state["case"], symbols, snapshots)
    scan = MarketScan(as_of=as_of, universe=symbols, snapshots=snapshots, portfolio=portfolio,
                      marks=dict(rt.recorded_scan.get("marks") or {}) if rt.recorded_scan is not None
                      else marks_outside(rt, portfolio, symbols, as_of), exits=exits)
    return done("SCANNING", scan, "PLANNING", config, **ids, **settled)


def close_on_levels(rt, state: CycleState, portfolio: PortfolioSnapshot, config: RunnableConfig
                    ) -> tuple[list[ClosedTrade], PortfolioSnapshot, dict]:
    """Exits are fills: audited first (the durability barrier), then committed through the execution backend
    against the portfolio version this cycle read; the rest of the cycle sees the book after them.
    A replay takes the recorded exits and book (the bars are data, like the bundles)."""
    if rt.recorded_scan is not None:
        return ([ClosedTrade.model_validate(e) for e in rt.recorded_scan.get("exits") or []],
                PortfolioSnapshot.model_validate(rt.recorded_scan["portfolio"]), {})
    known = set(rt.market.universe())
    bars = {s: rt.market.bars(s, p.checked_through or p.opened, state["as_of"])
            for s, p in portfolio.positions.items() if s in known}
    triggers, checked = due_exits(portfolio, bars, state["as_of"])
    if not triggers:
        return [], checked, {}
    closed, trades, after = apply_exits(checked, triggers, profile=get_profile(rt.config.market),
                                        fees_bps=rt.config.fees_bps, slippage_bps=rt.config.slippage_bps)
    if rt.execution is None:
        raise ValueError(f"{len(closed)} position(s) reached a level ({', '.join(c.symbol for c in closed)}) but no "
                         f"execution backend is wired to close them")
    audit_barrier(config)
    version = rt.execution.settle_exits(state["cycle_id"], state["session_id"], closed=closed, trades=trades, portfolio_after=after,
                                        base_version=state.get("portfolio_version"))
    for c in closed:
        emit("validation", {"schema": "ClosedTrade", "check": f"exit_{c.reason}", "ok": True, "symbol": c.symbol,
                            "date": c.closed, "price": c.exit_price, "realized_pnl": c.realized_pnl}, config)
    return closed, after, ({"portfolio_version": version} if version is not None else {})


def marks_outside(rt, portfolio: PortfolioSnapshot, symbols: list[str], as_of: str) -> dict[str, float]:
    """Held symbols the cycle does not trade still count in equity and exposure at their as-of close;
    one with no price at all fails the cycle closed rather than being valued at cost."""
    marks = {}
    for sym in sorted(set(portfolio.positions) - set(symbols)):
        bars = rt.market.as_of(sym, as_of, lookback=1) if sym in rt.market.universe() else None
        if bars is None or bars.empty:
            raise ValueError(f"held position {sym} has no price on or before {as_of}: cannot value the book")
        marks[sym] = round_value(float(bars["close"].iloc[-1]))
    return marks


def check_case(case: dict, symbols: list[str], snapshots: list[MarketSnapshot]) -> None:
    """In a backtest the Case is the given data: the scan must agree with it, or the cycle fails closed."""
    if sorted(case.get("tickers", [])) != sorted(symbols):
        raise ValueError(f"case tickers {case.get('tickers')} differ from the cycle's symbols {symbols}")
    for snap in snapshots:
        given = case["stock_data"][snap.symbol]["current_price"]
        if round_value(given) != snap.price:  # bundles carry prices at a fixed precision
            raise ValueError(f"case price {given} for {snap.symbol} differs from the point-in-time close "
                             f"{snap.price} on {snap.as_of}")


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
