"""What every node does the same way: announce its transition, emit its contract, fail closed."""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_RUNTIME
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import BaseModel

from agent.audit_events import emit
from graph.machine.cycle_context import CycleContext, context_of
from graph.machine.interrupts import raise_if_asked
from graph.machine.state import CONTRACT_KEYS, CycleState
from schemas.states import STATE_SPECS

# each state's node function, registered by the decorator below under its name in the state table
NODE_FUNCTIONS: dict[str, Callable] = {}
# a node body and a gate: the cycle's state, LangChain's config (callbacks, metadata) and the run's context
Body = Callable[[CycleState, RunnableConfig, CycleContext], Command]
Gate = Callable[[CycleState, RunnableConfig, CycleContext], Optional[Command]]


def state_node(name: str, gate: Optional[Gate] = None) -> Callable:
    """Registers a node body under its state's name, wrapped by `guarded`."""

    def wrap(body: Body) -> Callable:
        NODE_FUNCTIONS[name] = node = guarded(name, body, gate)
        return node

    return wrap


def guarded(name: str, body: Body, gate: Optional[Gate] = None) -> Callable:
    """A node body as the machine runs it: entry transition first; any exception ends the cycle failed closed,
    audited; and it goes only where the state table allows.

    A gate runs before the state is entered and may send the cycle elsewhere instead; it sits
    outside the try so that LangGraph's interrupt (an exception by design) reaches the runtime,
    and before the transition so that a resumed node does not announce itself twice.
    """
    if name not in STATE_SPECS:
        raise ValueError(f"state {name!r} is not in the state table (schemas/states.py)")

    @functools.wraps(body)
    def node(state: CycleState, config: RunnableConfig, runtime: Optional[Runtime[CycleContext]] = None) -> Command:
        # LangGraph hands `runtime` to a node whose signature names it; a node called by a swapped-in one
        # (transition_checked) is handed LangGraph's config, which carries the same Runtime
        # a Ctrl-C the CLI received stops the cycle here, between states (machine/interrupts.py)
        raise_if_asked(name, (config.get("metadata") or {}).get("cycle_id"))
        context = context_of(runtime or (config.get("configurable") or {}).get(CONFIG_KEY_RUNTIME), config)
        if gate is not None:
            redirect = gate(state, config, context)
            if redirect is not None:
                return checked(name, redirect, state, config)
        emit("transition", {"from": state.get("last_state") or "START", "to": name}, config)
        try:
            return checked(name, body(state, config, context), state, config)
        except Exception as e:  # noqa: BLE001 - fail closed: no later state (and so no execution) runs
            return fail(name, e, config, status=_failed_status(state))

    # LangGraph reads what a node accepts from its signature: this one's (it takes `runtime`), not the body's
    node.__signature__ = inspect.signature(node, follow_wrapped=False)  # type: ignore[attr-defined]
    return node


def transition_checked(name: str, fn: Callable[[CycleState, RunnableConfig], Command]) -> Callable:
    """A node function swapped in (graph/machine/builder.py overrides, Studio's wrapper) held to the same table."""

    @functools.wraps(fn)
    def node(state: CycleState, config: RunnableConfig) -> Command:
        return checked(name, fn(state, config), state, config)

    return node


class IllegalTransition(RuntimeError):
    """A node asked to go where the state table does not let it (schemas/states.py destinations)."""


def checked(name: str, command: Command, state: CycleState, config: RunnableConfig) -> Command:
    """The command if every state it goes to is one of `name`'s destinations; else the cycle ends failed closed
    with an `IllegalTransition` error event. LangGraph would follow any goto to an existing node (its
    `destinations=` only draws the graph), so DECIDING naming EXECUTING would skip VALIDATING: this is the check."""
    goto = command.goto
    targets = [goto] if isinstance(goto, (str, Send)) else list(goto or ())  # one target, or a sequence of them
    allowed = STATE_SPECS[name].destinations
    bad = [t if isinstance(t, str) else type(t).__name__ for t in targets if not (isinstance(t, str) and t in allowed)]
    if not bad:
        return command
    return fail(
        name,
        IllegalTransition(f"{name} may go to {', '.join(allowed)}; it asked for {', '.join(bad)}"),
        config,
        status=_failed_status(state),
    )


def _failed_status(state: CycleState) -> str:
    # after EXECUTING recorded its result, a failure must not read as "nothing executed"
    return EXECUTED_WITH_ERRORS if state.get("execution") else "failed"


# a state after EXECUTING failed; the execution (see its contract) stands: never re-run such a cycle
EXECUTED_WITH_ERRORS = "executed_with_errors"


def done(name: str, contract: BaseModel, goto: str, config: RunnableConfig, **update: Any) -> Command:
    data = contract.model_dump(mode="json")
    emit("contract", {"name": type(contract).__name__, "data": data}, config)
    if goto == END:
        emit("transition", {"from": name, "to": "END"}, config)
    return Command(goto=goto, update={CONTRACT_KEYS[name]: data, "last_state": name, **update})


def fail(
    name: str,
    error: BaseException,
    config: RunnableConfig,
    status: str = "failed",
    contract: Optional[BaseModel] = None,
) -> Command:
    info = {"state": name, "type": type(error).__name__, "message": str(error)}
    emit(
        "error",
        {**info, "traceback": traceback.format_exc(limit=6) if status in ("failed", EXECUTED_WITH_ERRORS) else None},
        config,
    )
    update: dict[str, Any] = {"status": status, "error": info, "last_state": name}
    if contract is not None:
        data = contract.model_dump(mode="json")
        emit("contract", {"name": type(contract).__name__, "data": data}, config)
        update[CONTRACT_KEYS[name]] = data
    emit("transition", {"from": name, "to": "END"}, config)
    return Command(goto=END, update=update)
