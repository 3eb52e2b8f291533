"""What every node does the same way: announce its transition, emit its contract, fail closed."""
from __future__ import annotations

import functools
import traceback
from typing import Any, Callable, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command
from pydantic import BaseModel

from agent.audit_events import emit
from graph.state import CONTRACT_KEYS, CycleState
from schemas.states import STATE_SPECS


# each state's node function, registered by the decorator below under its name in the state table
NODE_FUNCTIONS: dict[str, Callable] = {}


def state_node(name: str, gate: Optional[Callable[[CycleState, RunnableConfig], Optional[Command]]] = None) -> Callable:
    """Wraps a node body: entry transition first; any exception ends the cycle failed closed, audited.

    A gate runs before the state is entered and may send the cycle elsewhere instead; it sits
    outside the try so that LangGraph's interrupt (an exception by design) reaches the runtime,
    and before the transition so that a resumed node does not announce itself twice.
    """

    def wrap(body: Callable[[CycleState, RunnableConfig], Command]) -> Callable:
        @functools.wraps(body)
        def node(state: CycleState, config: RunnableConfig) -> Command:
            if gate is not None:
                redirect = gate(state, config)
                if redirect is not None:
                    return redirect
            emit("transition", {"from": state.get("last_state") or "START", "to": name}, config)
            try:
                return body(state, config)
            except Exception as e:  # fail closed: no later state (and so no execution) runs
                # after EXECUTING recorded its result, a failure must not read as "nothing executed"
                return fail(name, e, config, status=EXECUTED_WITH_ERRORS if state.get("execution") else "failed")

        if name not in STATE_SPECS:
            raise ValueError(f"state {name!r} is not in the state table (schemas/states.py)")
        NODE_FUNCTIONS[name] = node
        return node

    return wrap


# a state after EXECUTING failed; the execution (see its contract) stands: never re-run such a cycle
EXECUTED_WITH_ERRORS = "executed_with_errors"


def done(name: str, contract: BaseModel, goto: str, config: RunnableConfig,
         **update: Any) -> Command:
    data = contract.model_dump(mode="json")
    emit("contract", {"name": type(contract).__name__, "data": data}, config)
    if goto == END:
        emit("transition", {"from": name, "to": "END"}, config)
    return Command(goto=goto, update={CONTRACT_KEYS[name]: data, "last_state": name, **update})


def fail(name: str, error: BaseException, config: RunnableConfig, status: str = "failed",
         contract: Optional[BaseModel] = None) -> Command:
    info = {"state": name, "type": type(error).__name__, "message": str(error)}
    emit("error", {**info, "traceback": traceback.format_exc(limit=6) if status in ("failed", EXECUTED_WITH_ERRORS)
                   else None}, config)
    update: dict[str, Any] = {"status": status, "error": info, "last_state": name}
    if contract is not None:
        data = contract.model_dump(mode="json")
        emit("contract", {"name": type(contract).__name__, "data": data}, config)
        update[CONTRACT_KEYS[name]] = data
    emit("transition", {"from": name, "to": "END"}, config)
    return Command(goto=END, update=update)
