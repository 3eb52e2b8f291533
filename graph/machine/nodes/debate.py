"""DEBATE: one bull/bear debate with a rebuttal round per symbol, judged by the research manager; symbols in parallel."""

from __future__ import annotations

import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.debate import run_debate
from agent.parallel import run_parallel
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import done, state_node
from graph.machine.nodes.planning import scan_context
from graph.machine.state import CycleState
from schemas.analysis import QuantReport, SymbolPanel
from schemas.debate import DebateReport, DebateResult
from schemas.market import MarketScan


@state_node("DEBATE")
def debate(state: CycleState, config: RunnableConfig, context: CycleContext) -> Command[Literal["DECIDING", "__end__"]]:
    rt = context.services
    scan = MarketScan.model_validate(state["scan"])
    report = QuantReport.model_validate(state["quant"])
    model = rt.model("quick")
    call = context.call(scan_context(scan))  # the guards read the cycle's universe from it (no tool is bound)

    def debate(p: SymbolPanel) -> DebateResult:
        return run_debate(p, scan.snapshot(p.symbol), model, rt.config, config, call)

    tasks = {p.symbol: functools.partial(debate, p) for p in report.panels}
    if not rt.config.parallel_llm or len(tasks) < 2:
        # the offline model runs inline, in panel order: its recordings are unchanged
        debates = run_parallel(tasks, parallel=False)
    else:
        # symbols debate at once with a networked model: 3 calls deep instead of 3 per symbol. Their own
        # threads, not the shared pool's: each debate waits on that pool for its bull/bear calls, and pool
        # workers waiting on the pool would deadlock once there are as many symbols as workers
        with ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="tradegraph-debate") as ex:
            futures = {k: ex.submit(contextvars.copy_context().run, fn) for k, fn in tasks.items()}
        debates, errors = {}, []
        for k, f in futures.items():
            if (error := f.exception()) is not None:
                errors.append(error)
            else:
                debates[k] = f.result()
        if errors:  # the first in panel order, after every debate has finished (as run_parallel does)
            raise errors[0]
    results = [debates[p.symbol] for p in report.panels]
    return done("DEBATE", DebateReport(results=results), "DECIDING", config)
