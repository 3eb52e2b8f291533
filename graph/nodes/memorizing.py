"""MEMORIZING: a JSON-only summary pass; the factual fields are set by code, not by the model."""
from __future__ import annotations

from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command

from agent.passes import structured_pass
from agent.prompts import task_messages
from graph.nodes.common import done, state_node
from graph.runtime import runtime_of
from graph.state import CycleState
from schemas.memory import AgentMemory


def _decisions(state: CycleState) -> list[str]:
    out = []
    for t in (state.get("decision") or {}).get("theses", []):
        out.append(f"{t['symbol']} {t['direction']} entry {t['entry']} stop {t['stop']} target {t['target']}")
    for o in (state.get("decision") or {}).get("orders", []):
        out.append(f"{o['side']} {o['quantity']:g} {o['symbol']}")
    return out


@state_node("MEMORIZING")
def memorizing(state: CycleState, config: RunnableConfig) -> Command[Literal["__end__"]]:
    rt = runtime_of(config)
    status = state.get("status") or "completed"
    validation = state.get("validation") or {}
    execution = state.get("execution") or {}
    trades = (execution.get("result") or {}).get("executed_trades", [])
    decisions = _decisions(state)
    evidence = {"cycle_id": state["cycle_id"], "as_of": state["as_of"], "status": status,
                "symbols": list(state["symbols"]), "decisions": decisions,
                "reasons": validation.get("reasons", []) or ([execution["result"]["message"]]
                                                              if execution.get("status") == "rejected" else []),
                "trades": trades}
    memory = structured_pass(rt.model("quick"), task_messages("memory", evidence), AgentMemory,
                             max_retries=rt.config.max_repair_retries, config=config,
                             method=rt.config.structured_method)
    # grounding: what happened is fact, not the model's wording
    memory = memory.model_copy(update={"cycle_id": state["cycle_id"], "as_of": state["as_of"], "status": status,
                                       "decisions": decisions})
    return done("MEMORIZING", memory, END, config, status=status)
