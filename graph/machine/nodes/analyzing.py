"""ANALYZING: per symbol, four analysts and the quant run in parallel over the same snapshot."""

from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.analysts import run_analyst, run_quant
from agent.audit_events import emit
from agent.parallel import run_parallel
from agent.passes import ContractError, TickerGuardError
from agent.tools import ALLOW_LISTS, TOOLS
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import done, fail, state_node
from graph.machine.nodes.planning import scan_context
from graph.machine.state import CycleState
from schemas.analysis import ANALYST_ROLES, QuantReport, SymbolPanel
from schemas.market import MarketScan
from schemas.plan import Plan

QUORUM = 3


class QuorumError(RuntimeError):
    pass


@state_node("ANALYZING")
def analyzing(
    state: CycleState, config: RunnableConfig, context: CycleContext
) -> Command[Literal["DEBATE", "__end__"]]:
    rt = context.services
    scan = MarketScan.model_validate(state["scan"])
    plan = Plan.model_validate(state["plan"])
    call = context.call(scan_context(scan))
    model = rt.model("quick")

    def analyst(role, snap):
        def go():
            try:
                return run_analyst(role, snap, model, rt.config, config, call)
            except TickerGuardError:
                raise
            except ContractError as e:  # one analyst failing costs a vote, not the cycle (quorum decides)
                emit(
                    "error",
                    {"type": "analyst_failed", "symbol": snap.symbol, "analyst": role, "message": str(e)},
                    config,
                )
                return None

        return go

    def quant(snap):
        def go():
            try:
                return run_quant(
                    plan.quant_question, snap, model, TOOLS, ALLOW_LISTS["ANALYZING"], rt.config, config, call
                )
            except TickerGuardError:
                raise
            except ContractError as e:  # isolated like an analyst: this symbol loses its quant answer, no more
                emit("error", {"type": "quant_failed", "symbol": snap.symbol, "message": str(e)}, config)
                return None

        return go

    branches = {}
    for snap in scan.snapshots:
        if snap.symbol not in plan.assets:
            continue
        for role in ANALYST_ROLES:
            branches[f"{snap.symbol}|{role}"] = analyst(role, snap)
        branches[f"{snap.symbol}|quant"] = quant(snap)
    results = run_parallel(branches, parallel=rt.config.parallel_llm)

    panels = []
    for symbol in plan.assets:
        notes = [results[f"{symbol}|{r}"] for r in ANALYST_ROLES if results.get(f"{symbol}|{r}") is not None]
        failed = [r for r in ANALYST_ROLES if results.get(f"{symbol}|{r}") is None]
        panels.append(SymbolPanel(symbol=symbol, notes=notes, quant=results[f"{symbol}|quant"], failed_analysts=failed))
    short = [p for p in panels if len(p.notes) < QUORUM]
    report = QuantReport(panels=panels, degraded=bool(short))
    if short:
        detail = "; ".join(
            f"{p.symbol}: {len(p.notes)}/4 notes (failed: {', '.join(p.failed_analysts)})" for p in short
        )
        return fail(
            "ANALYZING",
            QuorumError(f"quorum of {QUORUM}/4 analysts not met — {detail}"),
            config,
            status="degraded",
            contract=report,
        )
    return done("ANALYZING", report, "DEBATE", config)
