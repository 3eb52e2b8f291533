"""EXECUTING: the execution tool, and only it, receives the validated decision. Keyed by cycle id:
a cycle that already executed returns its recorded result instead of filling twice."""

from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.audit_events import emit
from agent.tools import invoke_tool
from database.portfolio import PortfolioConflict
from graph.machine.broker.checks import cycle_status
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import EXECUTED_WITH_ERRORS, done, state_node
from graph.machine.nodes.planning import scan_context
from graph.machine.state import CycleState
from schemas.decision import DecisionResult, PortfolioDecision
from schemas.execution import ExecutionResult, ExecutionStatus
from schemas.market import MarketScan
from schemas.portfolio import PortfolioSnapshot
from schemas.validation import DecisionValidation


class ExecutionRefused(RuntimeError):
    pass


def await_approval(state: CycleState, config: RunnableConfig, context: CycleContext) -> Command | None:
    """With approval required, pause here (LangGraph interrupt) until `tradegraph approve` resumes the cycle."""
    if not state.get("approval_required"):
        return None
    # a human answers (the cycle pauses), or in a replay the recording (graph/machine/approval.py)
    answer = context.services.approver.answer(
        {
            "cycle_id": state["cycle_id"],
            "session_id": state["session_id"],
            "orders": state["decision"]["orders"],
            "validation_passed": state["validation"]["passed"],
        }
    )
    approved, by = bool(answer.get("approved")), str(answer.get("by") or "unknown")
    said = {"comment": str(answer["comment"])} if answer.get("comment") else {}
    emit("approval_decided", {"approved": approved, "by": by, **said}, config)
    if approved:
        return None
    return Command(goto="MEMORIZING", update={"status": "rejected", "approval": {"approved": False, "by": by, **said}})


@state_node("EXECUTING", gate=await_approval)
def executing(
    state: CycleState, config: RunnableConfig, context: CycleContext
) -> Command[Literal["MEMORIZING", "__end__"]]:
    rt = context.services
    validation = DecisionValidation.model_validate(state["validation"])
    if not validation.passed:  # the router never sends a failed validation here; refuse anyway
        raise ExecutionRefused("EXECUTING reached with a failed validation")
    if rt.execution is None:
        raise ExecutionRefused("no execution backend is wired for this run")
    execution = rt.execution  # the closure below fills through it
    scan = MarketScan.model_validate(state["scan"])
    decision = PortfolioDecision.model_validate(state["decision"])
    cycle_id, session_id = state["cycle_id"], state["session_id"]
    # audit before action: every event so far must be durable in the store, or nothing fills
    context.audit_barrier()

    recorded = rt.execution.lookup(cycle_id)
    if recorded is not None:
        result = ExecutionResult.model_validate({**recorded, "replayed_from_ledger": True})
        return done("EXECUTING", result, "MEMORIZING", config)

    # fill only against the portfolio this cycle read at SCANNING; the commit re-checks it atomically
    base_version, current = state.get("portfolio_version"), rt.execution.version(session_id)
    if base_version is not None and current is not None and current != base_version:
        raise PortfolioConflict.moved_on(session_id, cycle_id, base_version, current)

    after: dict[str, PortfolioSnapshot] = {}

    def execute(d):
        res, portfolio = execution.execute(
            d,
            cycle_id=cycle_id,
            session_id=session_id,
            universe=list(scan.universe),
            prices={s.symbol: s.price for s in scan.snapshots},
            prev_closes={s.symbol: s.prev_close for s in scan.snapshots if s.prev_close},
            portfolio=scan.portfolio,
            as_of=scan.as_of,
        )
        after["portfolio"] = portfolio
        return res

    raw = invoke_tool(
        "submit_decision",
        decision.as_decision().model_dump(mode="json"),
        state="EXECUTING",
        config=config,
        context=scan_context(scan, executor=execute),
    )
    res = DecisionResult.model_validate(raw)
    status: ExecutionStatus = "hold" if not decision.orders else _status(res)
    result = ExecutionResult(
        cycle_id=cycle_id, status=status, result=res, portfolio_after=after.get("portfolio", scan.portfolio)
    )
    rt.execution.record(cycle_id, session_id, result.model_dump(mode="json"), base_version=base_version)
    # a broker's partial result (some orders filled, others not, or still open) is never `completed`
    ended = {"rejected": {"status": "rejected"}, "partial": {"status": EXECUTED_WITH_ERRORS}}.get(status, {})
    return done("EXECUTING", result, "MEMORIZING", config, **ended)


def _status(res: DecisionResult) -> ExecutionStatus:
    if res.orders is not None:  # a broker's cycle: per order (graph/machine/broker/execution.py)
        return cycle_status(res)
    return "filled" if res.status == "accepted" else "rejected"
