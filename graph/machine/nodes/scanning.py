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

from agent.data.market import validate_as_of
from agent.features.bundle import round_value
from agent.audit_events import emit
from agent.dividends import credit_dividends, due_dividends
from agent.exits import apply_exits, due_exits
from agent.markets import bar_cutoff, fill_field
from agent.tools import ToolContext, invoke_tool
from graph.machine.nodes.common import done, state_node
from graph.machine.runtime import CycleContext
from graph.machine.state import CycleState
from schemas.market import MarketScan, MarketSnapshot, Untradable
from schemas.memory import ClosedTrade
from schemas.portfolio import DividendCredit, PortfolioSnapshot


@state_node("SCANNING")
def scanning(state: CycleState, config: RunnableConfig,
             context: CycleContext) -> Command[Literal["PLANNING", "__end__"]]:
    rt = context.runtime
    symbols, as_of = list(state["symbols"]), state["as_of"]
    if rt.recorded_scan is None:  # a replay re-reads the recording, not today's (maybe deleted) files
        # every symbol has a bar dated as_of: at the close its close, at the open its open is the price
        validate_as_of(rt.market, symbols, as_of, rt.profile)
    portfolio = PortfolioSnapshot.model_validate(state.get("portfolio") or {"cash": rt.config.starting_cash})
    # before anything else: dividends whose ex-date came, and positions whose stop, target or horizon the bars
    # since the last check reached
    ids = _ids(state, config)
    exits, dividends, portfolio, settled = settle_before_deciding(context, {**state, **ids}, portfolio, config)
    ctx = ToolContext(as_of=as_of, universe=symbols, portfolio=portfolio,
                      bundle_factory=lambda s: rt.bundle(s, as_of))
    # the scan reads the market through the registered tools, so its data access is audited like any other
    invoke_tool("get_portfolio", {}, state="SCANNING", config=config, context=ctx)
    invoke_tool("get_market_snapshot", {"symbols": symbols}, state="SCANNING", config=config, context=ctx)
    snapshots = [snapshot_of(s, ctx.bundle(s), as_of) for s in symbols]
    if state.get("case"):
        check_case(state["case"], symbols, snapshots)
    if rt.recorded_scan is not None:
        marks = dict(rt.recorded_scan.get("marks") or {})
        untradable = [Untradable.model_validate(u) for u in rt.recorded_scan.get("untradable") or []]
    else:
        marks, untradable = marks_outside(rt, portfolio, symbols, as_of)
        held = {u.symbol for u in untradable}  # a backtest's listed tickers left out today, held or not
        untradable += [Untradable(symbol=s, reason=why) for s, why in
                       sorted(((state.get("case") or {}).get("untradable") or {}).items()) if s not in held]
    scan = MarketScan(as_of=as_of, universe=symbols, snapshots=snapshots, portfolio=portfolio, marks=marks,
                      exits=exits, dividends=dividends, untradable=untradable)
    return done("SCANNING", scan, "PLANNING", config, **ids, **settled)


def snapshot_of(symbol: str, b, as_of: str) -> MarketSnapshot:
    """The decision's price: the bundle's last close at the close; at the open, as_of's opening price, with the
    last close (the session before) as the previous close."""
    last = b.history[-1] if b.history else None
    if b.open_price is not None:
        return MarketSnapshot(symbol=symbol, as_of=as_of, last_bar_date=last.date if last else b.as_of,
                              price=b.open_price, prev_close=b.technical.close, volume=b.technical.volume or 0.0,
                              bundle=b)
    return MarketSnapshot(symbol=symbol, as_of=as_of, last_bar_date=last.date if last else b.as_of,
                          price=b.technical.close, prev_close=b.technical.prev_close,
                          volume=b.technical.volume or 0.0, bundle=b)


def settle_before_deciding(context: CycleContext, state: CycleState, portfolio: PortfolioSnapshot,
                           config: RunnableConfig
                           ) -> tuple[list[ClosedTrade], list[DividendCredit], PortfolioSnapshot, dict]:
    """Dividends and exits are cash and fills: audited first (the durability barrier), then committed together
    through the execution backend against the portfolio version this cycle read; the rest of the cycle sees the
    book after them. Exits read the bars a decision may read whole (through the bar cutoff); a position is paid
    the ex-dates through its exit's date. A replay takes the recorded exits, dividends and book (data, like the
    bundles)."""
    rt = context.runtime
    if rt.recorded_scan is not None:
        return ([ClosedTrade.model_validate(e) for e in rt.recorded_scan.get("exits") or []],
                [DividendCredit.model_validate(d) for d in rt.recorded_scan.get("dividends") or []],
                PortfolioSnapshot.model_validate(rt.recorded_scan["portfolio"]), {})
    day, profile = state["as_of"], rt.profile
    through = bar_cutoff(profile, day)
    known = set(rt.market.universe())
    bars = {s: rt.market.bars(s, p.checked_through or p.opened, through)
            for s, p in portfolio.positions.items() if s in known}
    triggers, checked = due_exits(portfolio, bars, str(through.date()))
    credits: list[DividendCredit] = []
    if rt.actions is not None:
        credits = due_dividends(checked, rt.actions, day, {t.symbol: t.date for t in triggers})
        checked = credit_dividends(checked, credits, day)
    if not triggers and not credits:
        return [], [], checked, {}
    closed, trades, after = apply_exits(checked, triggers, profile=profile, fees_bps=rt.config.fees_bps,
                                        slippage_bps=rt.config.slippage_bps)
    if rt.execution is None:
        raise ValueError(f"{len(closed)} exit(s) and {len(credits)} dividend(s) to settle "
                         f"({', '.join(sorted({*(c.symbol for c in closed), *(c.symbol for c in credits)}))}) but no "
                         f"execution backend "
                         f"is wired to commit them")
    context.audit_barrier()
    version = rt.execution.settle_exits(state["cycle_id"], state["session_id"], closed=closed, trades=trades,
                                        portfolio_after=after, base_version=state.get("portfolio_version"),
                                        dividends=credits)
    for d in credits:
        emit("validation", {"schema": "DividendCredit", "check": "dividend", "ok": True, "symbol": d.symbol,
                            "date": d.ex_date, "per_share": d.per_share, "quantity": d.quantity,
                            "amount": d.amount}, config)
    for c in closed:
        emit("validation", {"schema": "ClosedTrade", "check": f"exit_{c.reason}", "ok": True, "symbol": c.symbol,
                            "date": c.closed, "price": c.exit_price, "realized_pnl": c.realized_pnl}, config)
    return closed, credits, after, ({"portfolio_version": version} if version is not None else {})


def marks_outside(rt, portfolio: PortfolioSnapshot, symbols: list[str], as_of: str
                  ) -> tuple[dict[str, float], list[Untradable]]:
    """Held symbols the cycle does not trade still count in equity and exposure, at the last price the decision
    may know: at the close the last close through as_of; at the open as_of's opening price, or the last close
    before it when as_of has no bar. One with no bar on as_of cannot trade today and is listed as untradable with
    its reason; one with no price at all fails the cycle closed rather than being valued at cost."""
    marks, untradable = {}, []
    profile = rt.profile
    for sym in sorted(set(portfolio.positions) - set(symbols)):
        bars = rt.market.as_of(sym, as_of, lookback=1) if sym in rt.market.universe() else None
        if bars is None or bars.empty:
            raise ValueError(f"held position {sym} has no price on or before {as_of}: cannot value the book")
        dated, bar = bars.index[-1].strftime("%Y-%m-%d"), bars.iloc[-1]
        price = round_value(float(bar[fill_field(profile)] if dated == as_of else bar["close"]))
        if price is None:  # NaN: no price at all
            raise ValueError(f"held position {sym} has no price on {dated}: cannot value the book")
        marks[sym] = price
        if dated == as_of:
            continue
        untradable.append(Untradable(symbol=sym, reason=f"no {sym} bar on {as_of}: it cannot trade today; valued at "
                                                       f"its last close {marks[sym]} of {dated}",
                                     price=marks[sym], price_date=dated))
    return marks, untradable


def check_case(case: dict, symbols: list[str], snapshots: list[MarketSnapshot]) -> None:
    """In a backtest the Case is the given data: the scan must agree with it, or the cycle fails closed."""
    if sorted(case.get("tickers", [])) != sorted(symbols):
        raise ValueError(f"case tickers {case.get('tickers')} differ from the cycle's symbols {symbols}")
    for snap in snapshots:
        given = case["stock_data"][snap.symbol]["current_price"]
        if round_value(given) != snap.price:  # bundles carry prices at a fixed precision
            raise ValueError(f"case price {given} for {snap.symbol} differs from the point-in-time price "
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
