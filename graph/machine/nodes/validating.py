"""VALIDATING: the deterministic risk engine; a single failed check routes past EXECUTING."""

from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.audit_events import emit
from agent.risk import evaluate, risk_input
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import done, state_node
from graph.machine.state import CycleState
from schemas.decision import PortfolioDecision
from schemas.market import MarketScan


@state_node("VALIDATING")
def validating(
    state: CycleState, config: RunnableConfig, context: CycleContext
) -> Command[Literal["EXECUTING", "MEMORIZING", "__end__"]]:
    rt = context.services
    scan = MarketScan.model_validate(state["scan"])
    decision = PortfolioDecision.model_validate(state["decision"])
    validation = evaluate(risk_input(decision, scan.portfolio, scan.prices(), scan.as_of), rt.config.risk)
    emit(
        "validation",
        {
            "schema": "DecisionValidation",
            "check": "risk_engine",
            "ok": validation.passed,
            "reasons": validation.reasons,
        },
        config,
    )
    mandate = getattr(rt.execution, "check_mandate", None)  # a broker's mandate (agent/brokers/mandate.py)
    if mandate is not None and decision.orders:
        refusals = mandate(decision.as_decision(), scan.prices(), scan.portfolio)
        for r in refusals:
            emit("validation", r.failed_check("Mandate", "mandate"), config)
        if refusals:
            validation = validation.model_copy(
                update={"passed": False, "reasons": [*validation.reasons, *(r.message for r in refusals)]}
            )
    if validation.passed:
        return done("VALIDATING", validation, "EXECUTING", config)
    return done("VALIDATING", validation, "MEMORIZING", config, status="rejected")
