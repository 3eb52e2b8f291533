"""The graph as `langgraph dev` / LangGraph Studio serves it (langgraph.json → `make_graph`).

The server calls this factory on every `get_graph`: once per run (access context
"threads.create_run", `configurable["__is_for_execution__"]` true) and also for schema,
drawing and state reads. Read-only calls get the bare graph. A run gets the same compiled
graph bound to what `graph.machine.runner.run_state_machine` gives a CLI cycle:

* an `AuditHandler` in the callbacks, so every event lands in `state_events` under
  session `studio-<thread_id>` and cycle `studio-<thread_id>:<run_id>`;
* one `CycleServices` per server process whose execution backend is the paper broker on the
  store (`PaperExecution`), and `configurable.session_id/cycle_id`, which SCANNING copies into
  the state because a Studio input names neither.

The cycle's services can NOT travel in `configurable["runtime"]` here: the server's checkpointer copies
every configurable key not starting with "__" into the checkpoint metadata and pickles it (a
CycleServices holds locks: "cannot pickle '_thread.lock'"), and thread history returns that
metadata as JSON. So the factory installs it as the process's default services, which
`graph.machine.cycle_context.context_of` falls back to when a run's config names none. A Studio server
process serves nothing else, so the process default is exactly the Studio's services.

The store is `database.connection.connect()` (MONGODB_URI, else the embedded nx-27017 server
under TRADEGRAPH_HOME), opened once per server process and reused by every run.

A Studio thread is one session and each run on it the session's next cycle, like
`tradegraph run --session`. The server carries a thread's state from run to run, so the graph
served here wraps SCANNING (same eight nodes, same edges) to start every run as a fresh cycle:
the previous run's session/cycle ids, last state, status, error and contracts are dropped, and
the portfolio is the session's stored one (`store.portfolios`), as `run_state_machine` does. Without
this a second run kept run 1's cycle_id, so EXECUTING found run 1's ledger entry and traded
nothing, and it started from the starting cash.

The graph is compiled without a checkpointer: the server refuses one and brings its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

import graph.machine.cycle_context as cycle_context
import graph.machine.recording  # noqa: F401 - registers how session summaries read a cycle's status
from agent.audit_events import emit
from database.connection import Store, connect
from database.writer import BufferedEventWriter
from graph.machine.audit import AuditHandler
from graph.machine.builder import build_graph
from graph.machine.cycle_context import CycleServices, default_services, process_services
from graph.machine.execution import PaperExecution
from graph.machine.manifest import build_manifest
from graph.machine.memory import MemoryBank
from graph.machine.nodes.scanning import scanning
from graph.machine.state import CONTRACT_KEYS, CycleState
from schemas.portfolio import PortfolioSnapshot

_lock = threading.Lock()
_graph = None
_store: Optional[Store] = None
_services: Optional[CycleServices] = None


# what one cycle leaves in a thread's state that the next run must not inherit
_CYCLE_KEYS = ("session_id", "cycle_id", "last_state", "status", "error", "approval", *CONTRACT_KEYS.values())


def studio_scanning(state: CycleState, config: RunnableConfig) -> Command:
    """SCANNING for a run on a server thread: a fresh cycle of the thread's session (see module doc)."""
    conf = (config or {}).get("configurable", {})
    fresh = {k: v for k, v in state.items() if k not in _CYCLE_KEYS}
    stored, version = (
        _store.portfolios.load_versioned(conf["session_id"])
        if _store is not None and conf.get("session_id")
        else (None, None)
    )
    if stored is not None:
        fresh["portfolio"] = stored.model_dump(mode="json")
    # EXECUTING commits only against the portfolio version read here
    fresh["portfolio_version"] = version
    if conf.get("session_id"):  # a run: its configuration and inputs first, as runner._invoke records a CLI cycle's
        rt = process_services()  # a server run carries no context: the process default (see module doc)
        emit("manifest", build_manifest(rt, studio_inputs(fresh, rt.config.starting_cash)), config)
    # session_id/cycle_id now come from the run config (graph/machine/nodes/scanning.py `_ids`)
    cmd = scanning(fresh, config)
    reset = {k: None for k in _CYCLE_KEYS if k in state}
    return Command(goto=cmd.goto, update={**reset, **(cmd.update or {})}, graph=cmd.graph, resume=cmd.resume)


def studio_inputs(state: dict[str, Any], starting_cash: float) -> dict[str, Any]:
    """What a Studio run starts from, as a CLI cycle's manifest records it (replay re-executes from these): the
    symbols and date submitted, the stored portfolio (or a new session's starting cash) and its version. A
    Studio run never pauses for approval."""
    portfolio = state.get("portfolio") or PortfolioSnapshot(cash=starting_cash).model_dump(mode="json")
    return {
        "symbols": list(state["symbols"]),
        "as_of": state["as_of"],
        "portfolio": portfolio,
        "portfolio_version": state.get("portfolio_version") or 0,
        "approval_required": False,
    }


def build_studio_graph():
    """The eight states and edges of graph.machine.builder, SCANNING wrapped; no checkpointer (the server supplies its own)."""
    return build_graph(overrides={"SCANNING": studio_scanning})


def _compiled():
    global _graph
    with _lock:
        if _graph is None:
            _graph = build_studio_graph()
        return _graph


def _resources() -> tuple[Store, CycleServices]:
    """The process's store and services, made on the first run (blocking I/O: called off the event loop)."""
    global _store, _services
    with _lock:
        if _store is None:
            _store = connect()
        if _services is None:
            rt = default_services()
            # Studio runs write their reviews and notes; they recall none (the recall object cannot travel in
            # a server's pickled configurable: a known gap, docs/limitations.md), and their manifests say so
            rt.config = dataclasses.replace(rt.config, memory="off")
            rt.execution = PaperExecution(_store, rt.config)
            rt.memory = MemoryBank(_store.memories)
            _services = rt
            # configurable values are pickled into checkpoint metadata by the server: the services
            # (locks, clients) can't travel there, so it becomes the process default instead
            cycle_context.set_default_services(rt)
        return _store, _services


class WriteThroughWriter:
    """Each event is stored before `put` returns.

    Why not the runner's background batches: the server gives the factory no hook at the end of
    a run, so nothing would flush a tail of buffered events before `runs.wait` answers. Writing
    through costs one round trip per event (~2 ms on nx-27017, about a second per cycle), which
    is fine for an interactive dev server. The flush after every put re-raises a storage error
    inside the callback (AuditHandler.raise_error), so a lost audit fails the run instead of
    vanishing. Puts from parallel analysts are ordered by the writer's lock, as in the runner.
    """

    def __init__(self, store: Store):
        self._writer = BufferedEventWriter(store.events, background=False, flush_every=1)
        self._summaries = store.sessions

    def put(self, event: dict[str, Any]) -> None:
        self._writer.put(event)
        self._writer.flush()
        if event.get("kind") == "transition":  # no end-of-run hook here: the summary follows state by state
            self._summaries.fold(event["session_id"])

    def close(self) -> None:
        self._writer.close()


def ids_for(configurable: dict[str, Any]) -> tuple[str, str]:
    """(session_id, cycle_id) of a server run: one session per thread, one cycle per run."""
    thread_id = configurable.get("thread_id") or f"nothread-{uuid.uuid4().hex[:12]}"
    run_id = configurable.get("run_id") or uuid.uuid4().hex
    session_id = f"studio-{thread_id}"
    return session_id, f"{session_id}:{run_id}"


async def make_graph(config: RunnableConfig):
    """Graph factory for `langgraph dev` (see langgraph_api/_factory_utils.py: a one-parameter
    factory receives the run's RunnableConfig; a coroutine is awaited)."""
    graph = _compiled()
    conf = (config or {}).get("configurable", {}) or {}
    if not conf.get("__is_for_execution__"):
        return graph  # schema / drawing / state reads: nothing runs, nothing is audited
    store, _runtime_installed = await asyncio.to_thread(_resources)
    session_id, cycle_id = ids_for(conf)
    handler = AuditHandler(WriteThroughWriter(store), session_id, cycle_id)
    return graph.with_config(
        callbacks=[handler],
        # plain strings only: configurable is copied into the (pickled, JSON-served) checkpoint metadata
        configurable={"session_id": session_id, "cycle_id": cycle_id},
        metadata={"session_id": session_id, "cycle_id": cycle_id},
        recursion_limit=25,
    )
