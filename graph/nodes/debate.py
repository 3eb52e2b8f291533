"""DEBATE: one bull/bear debate with a rebuttal round per symbol, judged by the research manager."""
from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.debate import run_debate
from graph.nodes.common import done, state_node
from graph.runtime import runtime_of
from graph.state import CycleState
from schemas.analysis import QuantReport
from schemas.debate import DebateReport
from schemas.market import MarketScan


@state_node("DEBATE")
def debate(state: CycleState, config: RunnableConfig) -> Command[Literal["DECIDING", "__end__"]]:
    rt = runtime_of(config)
    scan = MarketScan.model_validate(state["scan"])
    report = QuantReport.model_validate(state["quant"])
    model = rt.model("quick")
    results = [run_debate(panel, scan.snapshot(panel.symbol), model, rt.config, config) for panel in report.panels]
    return done("DEBATE", DebateReport(results=results), "DECIDING", config)
