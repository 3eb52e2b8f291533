"""DECIDING: a thesis per symbol (deep tier at high conviction; symbols in parallel), prices anchored by code,
orders sized."""

from __future__ import annotations

import functools
from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.features.regime import regime_words
from agent.parallel import run_parallel
from agent.trader import orders_for, run_trader, trader_tier
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import done, state_node
from graph.machine.nodes.planning import scan_context
from graph.machine.state import CycleState
from schemas.analysis import QuantReport
from schemas.debate import DebateReport, DebateResult
from schemas.decision import PortfolioDecision, TradeThesis
from schemas.market import MarketScan


@state_node("DECIDING")
def deciding(
    state: CycleState, config: RunnableConfig, context: CycleContext
) -> Command[Literal["VALIDATING", "__end__"]]:
    rt = context.services
    scan = MarketScan.model_validate(state["scan"])
    report = QuantReport.model_validate(state["quant"])
    debates = DebateReport.model_validate(state["debate"])
    # one thesis per symbol, independent of the others: a networked model writes them at once (one call deep,
    # not one per symbol); the offline model inline, in debate order
    call = context.call(scan_context(scan))  # the guards read the cycle's universe from it (no tool is bound)

    def thesis(d: DebateResult) -> TradeThesis:
        return run_trader(
            d,
            report.panel(d.symbol),
            scan.snapshot(d.symbol),
            rt.model(trader_tier(d, rt.config)),
            rt.config,
            config,
            call,
        )

    tasks = {
        d.symbol: functools.partial(thesis, d) for d in debates.results if d.winner != "NONE"
    }  # no side was taken: nothing to write a thesis for
    written = run_parallel(tasks, parallel=rt.config.parallel_llm)
    theses = [written[s] for s in tasks]
    setups = {s.symbol: regime_words(s.bundle.technical) for s in scan.snapshots}
    orders = orders_for(theses, scan.portfolio, scan.prices(), rt.config, scan.as_of, setups)
    summary = "; ".join(f"{t.symbol} {t.direction} (conviction {t.conviction})" for t in theses)
    unsized = sorted(
        {t.symbol for t in theses if t.direction == "LONG" and not scan.portfolio.quantity(t.symbol)}
        - {o.symbol for o in orders}
    )
    rationale = (
        (f"{summary}. " if summary else "No analyst took a side. ")
        + (
            f"{len(orders)} order(s) implied by the theses and the book."
            if orders
            else "No position change is implied: hold."
        )
        + (f" Not bought, as no lot fits the risk limits: {', '.join(unsized)}." if unsized else "")
    )
    decision = PortfolioDecision(theses=theses, orders=orders, rationale=rationale)
    return done("DECIDING", decision, "VALIDATING", config)
