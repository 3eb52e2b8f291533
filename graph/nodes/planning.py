"""PLANNING: a tool pass over portfolio and market tools, then a JSON-only Plan pass."""
from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.fence import fence
from agent.passes import structured_pass, tool_pass
from agent.prompts import task_messages
from agent.tools import ALLOW_LISTS, REGISTRY, ToolContext
from graph.nodes.common import done, state_node
from graph.runtime import runtime_of, with_tools
from graph.state import CycleState
from schemas.market import MarketScan
from schemas.plan import Plan


def scan_context(scan: MarketScan, executor=None) -> ToolContext:
    """Later states' tools read the bundles SCANNING computed, never fresh data."""
    return ToolContext(as_of=scan.as_of, universe=list(scan.universe), portfolio=scan.portfolio,
                       bundle_factory=lambda s: scan.snapshot(s).bundle, executor=executor)


@state_node("PLANNING")
def planning(state: CycleState, config: RunnableConfig) -> Command[Literal["ANALYZING", "__end__"]]:
    rt = runtime_of(config)
    scan = MarketScan.model_validate(state["scan"])
    tool_config = with_tools(config, scan_context(scan))
    evidence = {
        "as_of": scan.as_of,
        "symbols": scan.universe,
        "portfolio": {"cash": scan.portfolio.cash,
                      "positions": {s: p.quantity for s, p in scan.portfolio.positions.items()}},
        "market": [{"symbol": s.symbol, "price": s.price, "rsi14": s.bundle.technical.rsi14,
                    "sma50": s.bundle.technical.sma50, "atr14": s.bundle.technical.atr14} for s in scan.snapshots],
        "limits": {"risk_per_trade_pct": rt.config.risk.risk_per_trade_pct,
                   "max_positions": rt.config.risk.max_positions},
    }
    items = (state.get("case") or {}).get("case_data", {}).get("items", [])
    if items:  # a backtest Case's own information items: third-party text, fenced like headlines
        evidence["case_items"] = [{"kind": i["kind"], "timestamp": i.get("timestamp"), "content": fence(i["content"])}
                                  for i in items]
    model = rt.model("quick")
    messages = tool_pass(model, task_messages("planning", evidence), REGISTRY, ALLOW_LISTS["PLANNING"],
                         state="PLANNING", max_steps=rt.config.max_tool_steps, config=tool_config)

    def assets_in_universe(plan: Plan) -> None:
        outside = [a for a in plan.assets if a not in scan.universe]
        if outside:
            raise ValueError(f"assets {', '.join(outside)} are not in this cycle's universe "
                             f"({', '.join(scan.universe)})")

    plan = structured_pass(model, messages, Plan, max_retries=rt.config.max_repair_retries, config=tool_config,
                           method=rt.config.structured_method, check=assets_in_universe)
    return done("PLANNING", plan, "ANALYZING", config)
