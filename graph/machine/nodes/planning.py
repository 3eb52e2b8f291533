"""PLANNING: one JSON-only Plan pass over evidence that code builds from the scan: the portfolio and each symbol's
snapshot, exactly what `get_portfolio` and `get_market_snapshot` return (pass protocol 3, agent/passes.py).

Under protocols 1 and 2 (a replay of a recording made then) it first ran a tool pass over those two tools, with
the smaller evidence of that time: both are kept, byte for byte, since a replay matches requests by their messages.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.call_schema import distinct_symbols
from agent.fence import fence
from agent.passes import structured_pass, tool_pass
from agent.prompts import task_messages
from agent.protocols import version
from agent.tools import TOOLS, ToolContext, portfolio_record, snapshot_row
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import done, state_node
from graph.machine.state import CycleState
from schemas.market import MarketScan
from schemas.plan import Plan


def scan_context(scan: MarketScan, executor=None) -> ToolContext:
    """Later states' tools read the bundles SCANNING computed, never fresh data."""
    return ToolContext(
        as_of=scan.as_of,
        universe=list(scan.universe),
        portfolio=scan.portfolio,
        bundle_factory=lambda s: scan.snapshot(s).bundle,
        executor=executor,
    )


def planning_evidence(scan: MarketScan, settings, *, with_tool_answers: bool) -> dict:
    """What the planner reads. With the tool answers (protocol 3): the portfolio as `get_portfolio` returns it and
    the universe's rows as `get_market_snapshot` returns them, built by the same functions. Without (protocols 1 and
    2, whose model called those tools): the summary those protocols sent, unchanged."""
    if with_tool_answers:
        portfolio = portfolio_record(scan.portfolio)
        market = [snapshot_row(s.symbol, s.bundle) for s in scan.snapshots]
    else:
        portfolio = {
            "cash": scan.portfolio.cash,
            "positions": {s: p.quantity for s, p in scan.portfolio.positions.items()},
        }
        market = [
            {
                "symbol": s.symbol,
                "price": s.price,
                "rsi14": s.bundle.technical.rsi14,
                "sma50": s.bundle.technical.sma50,
                "atr14": s.bundle.technical.atr14,
            }
            for s in scan.snapshots
        ]
    return {
        "as_of": scan.as_of,
        "symbols": scan.universe,
        "portfolio": portfolio,
        "market": market,
        "limits": {
            "risk_per_trade_pct": settings.risk.risk_per_trade_pct,
            "max_positions": settings.risk.max_positions,
        },
    }


@state_node("PLANNING")
def planning(
    state: CycleState, config: RunnableConfig, context: CycleContext
) -> Command[Literal["ANALYZING", "__end__"]]:
    rt = context.services
    scan = MarketScan.model_validate(state["scan"])
    call = context.call(scan_context(scan))
    protocol = version(rt.protocol)
    tools = protocol.allow_list("PLANNING")
    evidence = planning_evidence(scan, rt.config, with_tool_answers=not tools)
    items = (state.get("case") or {}).get("case_data", {}).get("items", [])
    if items:  # a backtest Case's own information items: third-party text, fenced like headlines
        evidence["case_items"] = [
            {"kind": i["kind"], "timestamp": i.get("timestamp"), "content": fence(i["content"])} for i in items
        ]
    model = rt.model("quick")
    messages = task_messages("planning", evidence, protocol=protocol.number)
    if tools:  # a protocol with `planning_tools` (1 and 2): the model fetched the portfolio and the snapshot itself
        messages = tool_pass(
            model,
            messages,
            TOOLS,
            tools,
            state="PLANNING",
            max_steps=rt.config.max_tool_steps,
            config=config,
            call=call,
        )

    def assets_in_universe(plan: Plan) -> None:
        outside = [a for a in plan.assets if a not in scan.universe]
        if outside:
            raise ValueError(
                f"assets {', '.join(outside)} are not in this cycle's universe ({', '.join(scan.universe)})"
            )

    plan = structured_pass(
        model,
        messages,
        Plan,
        max_retries=rt.config.max_repair_retries,
        config=config,
        call=call,
        method=rt.config.structured_method,
        check=assets_in_universe,
        pins={"assets": distinct_symbols(scan.universe)},
    )
    return done("PLANNING", plan, "ANALYZING", config)
