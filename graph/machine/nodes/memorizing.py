"""MEMORIZING: the reviewer for each position this cycle closed and a JSON-only summary pass (at once with a
networked model), and the memory records of both written to the store. The factual fields are set by code, not
by the model."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command

from agent.exits import closed_trade
from agent.features.regime import regime_words
from agent.parallel import run_parallel
from agent.passes import structured_pass
from agent.prompts import task_messages
from agent.reviewer import review_trade
from graph.machine.cycle_context import CycleContext
from graph.machine.nodes.common import EXECUTED_WITH_ERRORS, done, state_node
from graph.machine.state import CycleState
from schemas.decision import ExecutedTrade
from schemas.market import MarketScan
from schemas.memory import AgentMemory, ClosedTrade, MemoryRecord, TradeReview


def _decisions(state: CycleState) -> list[str]:
    out = []
    for t in (state.get("decision") or {}).get("theses", []):
        out.append(f"{t['symbol']} {t['direction']} entry {t['entry']} stop {t['stop']} target {t['target']}")
    for o in (state.get("decision") or {}).get("orders", []):
        out.append(f"{o['side']} {o['quantity']:g} {o['symbol']}")
    return out


def closed_this_cycle(state: CycleState, scan: MarketScan) -> list[ClosedTrade]:
    """Positions closed on their levels at the scan, then those a decision sold outright (`signal`)."""
    closed = list(scan.exits)
    execution = state.get("execution") or {}
    for raw in (execution.get("result") or {}).get("executed_trades", []):
        trade = ExecutedTrade.model_validate(raw)
        pos = scan.portfolio.positions.get(trade.symbol)
        if trade.side == "SELL" and pos is not None and trade.quantity >= pos.quantity - 1e-9:
            closed.append(closed_trade(pos, trade, "signal", scan.snapshot(trade.symbol).price, pos.sessions_held))
    return closed


def memory_records(
    state: CycleState, scan: MarketScan, memory: AgentMemory, closed: list[ClosedTrade], run_id: str | None
) -> list[MemoryRecord]:
    cycle_id, session_id = state["cycle_id"], state["session_id"]
    records = [
        MemoryRecord(
            memory_id=f"{cycle_id}:review:{t.symbol}",
            kind="review",
            symbol=t.symbol,
            direction=t.direction,
            outcome=r.outcome,
            signal=r.signal_evolution,
            known_at=t.closed,
            session_id=session_id,
            run_id=run_id,
            cycle_id=cycle_id,
            text=r.memory_record,
        )
        for t, r in zip(closed, memory.reviews)
    ]
    lessons = " ".join(f"Lesson: {x}" for x in memory.lessons)
    decision = state.get("decision") or {}
    for th in decision.get("theses", []):
        sym = th["symbol"]
        setup = " ".join(regime_words(scan.snapshot(sym).bundle.technical))
        orders = "; ".join(f"{o['side']} {o['quantity']:g}" for o in decision.get("orders", []) if o["symbol"] == sym)
        records.append(
            MemoryRecord(
                memory_id=f"{cycle_id}:cycle:{sym}",
                kind="cycle",
                symbol=sym,
                direction=th["direction"],
                known_at=scan.as_of,
                session_id=session_id,
                run_id=run_id,
                cycle_id=cycle_id,
                text=(
                    f"{sym} {th['direction']} setup {setup}; conviction {th['conviction']}, entry {th['entry']} stop "
                    f"{th['stop']} target {th['target']}; {orders or 'no order'}; cycle {memory.status}. {lessons}"
                )[:4000],
            )
        )
    return records


@state_node("MEMORIZING")
def memorizing(state: CycleState, config: RunnableConfig, context: CycleContext) -> Command[Literal["__end__"]]:
    rt = context.services
    call = context.call()
    status = state.get("status") or "completed"
    validation = state.get("validation") or {}
    execution = state.get("execution") or {}
    scan = MarketScan.model_validate(state["scan"])
    closed = closed_this_cycle(state, scan)
    trades = (execution.get("result") or {}).get("executed_trades", [])
    decisions = _decisions(state)
    # the id is the runner's, grounded below: naming it in the prompt would make every rerun of an identical
    # cycle a new request (no cache hit) for a field the model cannot get wrong anyway
    evidence = {
        "cycle_id": "(set by the runner)",
        "as_of": state["as_of"],
        "status": status,
        "symbols": list(state["symbols"]),
        "decisions": decisions,
        "reasons": validation.get("reasons", [])
        or ([execution["result"]["message"]] if execution.get("status") == "rejected" else []),
        "trades": trades,
    }
    model = rt.model("quick")
    # the reviews and the summary read nothing of each other: with a networked model they are asked at once (one
    # call deep instead of one per closed position + 1); the offline model runs them inline, reviews first, as
    # before, so its recordings are unchanged
    tasks: dict[str, Callable[[], Any]] = {
        f"review:{i}": functools.partial(review_trade, t, model, rt.config, config, call) for i, t in enumerate(closed)
    }
    prompt = task_messages("memory", evidence, protocol=rt.protocol)
    tasks["summary"] = lambda: structured_pass(
        model,
        prompt,
        AgentMemory,
        max_retries=rt.config.max_repair_retries,
        config=config,
        call=call,
        method=rt.config.structured_method,
    )
    written = run_parallel(tasks, parallel=rt.config.parallel_llm)
    reviews: list[TradeReview] = [written[f"review:{i}"] for i in range(len(closed))]
    memory: AgentMemory = written["summary"]
    # grounding: what happened is fact, not the model's wording
    # the note's status is one the model is shown (MemorisedStatus): a broker's partial fill is noted `degraded`,
    # and the cycle itself still ends executed_with_errors
    noted = "degraded" if status == EXECUTED_WITH_ERRORS else status
    memory = memory.model_copy(
        update={
            "cycle_id": state["cycle_id"],
            "as_of": state["as_of"],
            "status": noted,
            "decisions": decisions,
            "reviews": reviews,
        }
    )
    if rt.memory is not None:  # a replay writes nothing but its own audit log
        rt.memory.write(memory_records(state, scan, memory, closed, rt.run_id))
    return done("MEMORIZING", memory, END, config, status=status)
