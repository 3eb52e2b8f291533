"""Runs one audited cycle: the one function the CLI, scripts, tests and benchmarks all call."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Optional

from langgraph.types import Command
from pymongo.errors import PyMongoError

from agent.budget import Budget
from agent.data.market import DataError, validate_as_of
from database import claims, running
from database.approvals import Decisions, describe
from database.broker import BrokerSessions, KillSwitch
from database.checkpoint import checkpointer
from database.connection import Store
from database.errors import AuditSpooled
from database.portfolio import complete_pending
from database.writer import BufferedEventWriter
from graph.machine import recording  # noqa: F401 - registers how a session summary reads its last cycle
from graph.machine.audit import AuditHandler
from graph.machine.broker.checks import halted
from graph.machine.broker.choose import execution_for, session_broker
from graph.machine.builder import build_graph
from graph.machine.cycle_context import CycleContext, CycleServices, default_services
from graph.machine.errors import ApprovalConflict, InputError, NothingPending, SessionNotFound
from graph.machine.interrupts import mark_filled, raise_if_asked, stopped_before
from graph.machine.manifest import build_manifest
from graph.machine.memory import MemoryBank, MemoryRecall
from graph.machine.state import CONTRACT_KEYS
from graph.machine.timeline import refuse_going_back
from schemas.base import MAX_SYMBOLS, CycleStatus
from schemas.events import new_event
from schemas.portfolio import PortfolioSnapshot


@dataclass
class CycleOutcome:
    session_id: str
    cycle_id: str
    status: CycleStatus
    contracts: dict[str, Any]
    events: int
    error: Optional[dict] = None
    llm_calls: int = 0  # requests sent (failed attempts included); answers from the cache are cached_calls
    tokens: dict[str, int] = field(default_factory=dict)
    cached_calls: int = 0
    # tokens and dollars of the cycle, in total and by state (agent/pricing.py Spend.as_dict)
    cost: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # set when the store stopped taking this cycle's events: they wait in a local spool file
    audit_error: Optional[str] = None
    # each agent's recalled notes ({agent, symbol, query, filter, hits}), as audited
    notes: list[dict] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "cycle_id": self.cycle_id,
            "status": self.status,
            "contracts": self.contracts,
            "events": self.events,
            "audit_error": self.audit_error,
        }


_GRAPH = None

# called once an audited cycle has ended with all its events stored (not when it paused for approval): the layers
# above hook in here (telemetry's live export) rather than the runner importing them. A hook never raises.
AFTER_CYCLE: list[Callable[[Store, str, str], object]] = []


def after_cycle(hook: Callable[[Store, str, str], object]) -> Callable[[Store, str, str], object]:
    if hook not in AFTER_CYCLE:
        AFTER_CYCLE.append(hook)
    return hook


def compiled_graph():
    global _GRAPH
    if _GRAPH is None:
        _GRAPH = build_graph()
    return _GRAPH


def parse_symbols(raw: str | list[str]) -> list[str]:
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    symbols = [s.strip().upper() for s in items if s.strip()]
    if not symbols:
        raise InputError(f"no symbols given in {raw!r}")
    if len(set(symbols)) != len(symbols):
        raise InputError(f"duplicate symbol in {raw!r}")
    if len(symbols) > MAX_SYMBOLS:  # every per-symbol list of the contracts is sized for at most this many
        raise InputError(f"{len(symbols)} symbols given: a cycle takes at most {MAX_SYMBOLS}")
    return symbols


def next_cycle_id(store: Store, session_id: str) -> str:
    return f"{session_id}:c{store.events.next_cycle(session_id)}"


def run_state_machine(
    symbols: str | list[str],
    as_of: str,
    *,
    store: Store,
    session_id: Optional[str] = None,
    services: Optional[CycleServices] = None,
    audit: bool = True,
    graph=None,
    approve: bool = False,
    case: Optional[dict] = None,
    broker: Optional[str] = None,
) -> CycleOutcome:
    """Validates inputs before anything is written, so bad input leaves no half-written session.

    With approve=True the cycle pauses before EXECUTING (status `pending_approval`), checkpointed
    in the store, until `approve_cycle` resumes it, from this process or another. `broker` (sim, alpaca; default
    $TRADEGRAPH_BROKER) picks the execution backend; a broker's mandate may require the pause.
    """
    rt = _with_execution(services or default_services(), store, broker=broker, session_id=session_id)
    symbols = parse_symbols(symbols)
    if session_id is not None and not store.events.exists(session_id) and store.portfolios.load(session_id) is None:
        # first: a session looked for in the wrong store would otherwise read as the data's fault (its own files
        # are known only from its recording)
        raise SessionNotFound(f"unknown session '{session_id}'")
    try:
        validate_as_of(rt.market, symbols, as_of, rt.config.market)
    except DataError as e:
        raise InputError(str(e)) from None
    if session_id is not None:
        # a fill a crash left half way is finished (or aborted) before this cycle reads the portfolio
        complete_pending(store.portfolios, store.executions, session_id)
        portfolio, version = store.portfolios.load_versioned(session_id)
        refuse_going_back(store, session_id, as_of, portfolio)  # never back in time with a later book
    else:
        session_id = f"s-{uuid.uuid4().hex[:12]}"
        portfolio, version = None, 0
    portfolio = portfolio or PortfolioSnapshot(cash=rt.config.starting_cash)
    cycle_id = next_cycle_id(store, session_id)
    backend: Any = rt.execution  # a broker's backend has a mandate (graph/machine/broker/execution.py)
    if getattr(backend, "mandate", None) is not None:  # a broker: the session is bound to it
        BrokerSessions(store.db).bind(session_id, backend.broker.name, backend.broker.settings.host)
        approve = approve or backend.mandate.approval_required
    inputs = {
        "symbols": symbols,
        "as_of": as_of,
        "session_id": session_id,
        "cycle_id": cycle_id,
        "portfolio": portfolio.model_dump(mode="json"),
        "portfolio_version": version,
        "approval_required": approve,
    }
    if case is not None:
        inputs["case"] = case
    if approve:
        graph = graph or build_graph(checkpointer=checkpointer(store))
    return _invoke(
        graph or compiled_graph(),
        inputs,
        store=store,
        services=rt,
        session_id=session_id,
        cycle_id=cycle_id,
        audit=audit,
    )


def approve_cycle(
    session_id: str,
    *,
    store: Store,
    approved: bool,
    by: str,
    services: Optional[CycleServices] = None,
    comment: Optional[str] = None,
) -> CycleOutcome:
    """Resumes the session's paused cycle. One decision per cycle: the caller first claims it by compare-and-set
    (database/approvals.py), so of two approvers racing on any transport exactly one resumes it; the other, and
    anyone after, is refused naming who decided and when. Nothing pending executes nothing; the execution
    ledger would refuse a second fill in any case."""
    if not store.events.exists(session_id):
        raise SessionNotFound(f"unknown session '{session_id}'")
    graph = build_graph(checkpointer=checkpointer(store))
    cycle_id = _paused_cycle(graph, store, session_id)
    decisions = Decisions(store.db)
    if cycle_id is None:
        last = decisions.last(session_id)
        raise NothingPending(
            f"session '{session_id}' has no cycle waiting for approval" + (f": {describe(last)}" if last else "")
        )
    prior = decisions.held(cycle_id)  # read before claiming: a claim taken over is replaced
    started = _fill_started(store, cycle_id)
    if started is not None and not approved:
        _refuse(
            store,
            session_id,
            cycle_id,
            "approval_refused_fill_started",
            f"rejection by {by} of session '{session_id}' refused: cycle {cycle_id}'s fill was started by "
            f"{_whose(prior)} (execution ledger: {started}); a fill once started is finished, never reversed: "
            f"`tradegraph store recover` finishes that approval",
            by=by,
        )
    token, held = decisions.claim(cycle_id, session_id, approved=approved, by=by)
    if token is None:
        assert held is not None  # claim() names the claim that holds the cycle whenever it is not ours
        _refuse(
            store,
            session_id,
            cycle_id,
            "approval_refused_decided",
            f"{'approval' if approved else 'rejection'} by {by} of session '{session_id}' refused: {describe(held)}",
            by=by,
        )
    resume_by, resume_comment = by, comment
    if started is not None and prior is not None and prior.get("approved"):
        # the dead approver's fill is what this resume finishes: the decision stays theirs
        decisions.adopt(cycle_id, token, prior, finished_by=by)
        resume_by, resume_comment = str(prior.get("by")), None  # their words were never recorded
    status = None
    try:
        if approved and session_broker(store, session_id) is not None:
            _refuse_if_halted(store, session_id, cycle_id, by)
        if approved and started is None:  # a started fill is this cycle's own move of the portfolio, not a stale one
            _refuse_if_stale(
                store, session_id, cycle_id, graph.get_state(_thread(cycle_id)).values.get("portfolio_version")
            )
        rt = _with_execution(services or default_services(), store, session_id=session_id)
        # a comment only when one was given: a decision without one is recorded as it always was
        answer = {"approved": approved, "by": resume_by, **({"comment": resume_comment} if resume_comment else {})}
        # a Ctrl-C that came while the approval was checked: nothing is recorded, the claim is released and the
        # cycle stays paused (EXECUTING's own check would record it ended while its checkpoint still waits)
        raise_if_asked("EXECUTING", cycle_id)
        out = _invoke(
            graph,
            Command(resume=answer),
            store=store,
            services=rt,
            session_id=session_id,
            cycle_id=cycle_id,
            audit=True,
        )
        status = out.status
        return out
    finally:
        _close_claim(graph, store, decisions, session_id, cycle_id, token, status)


def finish_started_approvals(store: Store, services: Callable[[], CycleServices]) -> list[CycleOutcome]:
    """`store recover`'s part for approvals: each paused cycle whose approver died after its fill was started (its
    claim still `deciding`, its decider gone, an execution-ledger entry for the cycle) is resumed with that
    approval, so the cycle ends, its claim is decided and its log records what the portfolio holds."""
    out = []
    for claim in Decisions(store.db).abandoned():
        if claim.get("approved") and _fill_started(store, claim["_id"]) is not None:
            out.append(
                approve_cycle(claim["session_id"], store=store, approved=True, by="store recover", services=services())
            )
    return out


def _fill_started(store: Store, cycle_id: str) -> Optional[str]:
    """The ledger state of the cycle's fill when an approval started one (pending: its process stopped half way;
    committed), else None (no entry, or aborted: nothing filled)."""
    entry = store.executions.entry(cycle_id)
    state = (entry or {}).get("state")
    return None if entry is None or state == "aborted" else str(state)


def _whose(claim: Optional[dict]) -> str:
    if not claim or not claim.get("approved"):
        return "its approval"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(claim.get("at") or 0)))
    return f"the approval by {claim.get('by')} at {at}"


def _close_claim(
    graph, store: Store, decisions: Decisions, session_id: str, cycle_id: str, token: str, status: Optional[str]
) -> None:
    """Settled with the cycle's status once the graph took the decision; released when the cycle is still paused
    (refused as stale, a crash before resuming), so it can be decided again. With the store gone the claim stays
    `deciding` under no decider, and the next approver takes it over."""
    try:
        if status is None and _paused_cycle(graph, store, session_id, only=cycle_id) == cycle_id:
            decisions.release(cycle_id, token)
        else:
            # a crash after the graph took the decision: executed_with_errors once the ledger holds the fill
            decisions.settle(cycle_id, token, status or _crash_status(store, cycle_id) or "failed")
    except PyMongoError:
        claims.drop(token)  # never hide the exception the decision itself raised


def _thread(cycle_id: str) -> dict:
    return {"configurable": {"thread_id": cycle_id}}


def _paused_cycle(graph, store: Store, session_id: str, only: Optional[str] = None) -> Optional[str]:
    """The session's cycle paused before EXECUTING (its checkpoint waits on the approval interrupt), or None."""
    for cycle_id in [only] if only else reversed(store.events.cycle_ids(session_id)):
        snapshot = graph.get_state(_thread(cycle_id))
        if snapshot.next == ("EXECUTING",) and any(t.interrupts for t in snapshot.tasks):
            return cycle_id
    return None


def _refuse(store: Store, session_id: str, cycle_id: str, check: str, message: str, **details: Any) -> NoReturn:
    """An approval refused is audited in the cycle it was meant for, then raised (ApprovalConflict: exit 2, 409)."""
    with store.writer(background=False) as writer:
        writer.put(
            new_event(
                session_id,
                cycle_id,
                "EXECUTING",
                "validation",
                {"schema": "HumanApproval", "check": check, "ok": False, "error": message, **details},
            )
        )
    raise ApprovalConflict(message)


def _refuse_if_stale(store: Store, session_id: str, cycle_id: str, read_version: Optional[int]) -> None:
    """Refused, not re-validated: the decision was sized and risk-checked against a portfolio that is gone.
    The refusal is audited; the cycle stays paused (reject it, or run a new cycle)."""
    complete_pending(store.portfolios, store.executions, session_id)
    now = store.portfolios.state(session_id)
    if read_version is None or int(now.get("version") or 0) == int(read_version):
        return
    _refuse(
        store,
        session_id,
        cycle_id,
        "approval_refused_stale",
        f"approval of cycle {cycle_id} refused: session '{session_id}' moved on since it was decided "
        f"(portfolio version {read_version}, now {now.get('version')} after cycle {now.get('cycle_id')}); "
        f"reject it with `tradegraph approve {session_id} --reject` and run a new cycle",
    )


def _refuse_if_halted(store: Store, session_id: str, cycle_id: str, by: str) -> None:
    """The kill switch (tradegraph broker halt) holds every broker cycle: an approval meanwhile is refused, audited,
    and the cycle stays paused until `broker resume`."""
    refusal = halted(KillSwitch(store.db).state())
    if refusal is not None:
        _refuse(
            store,
            session_id,
            cycle_id,
            "approval_refused_halted",
            f"approval of cycle {cycle_id} refused: the broker is halted ({refusal.value}); "
            f"`tradegraph broker resume` first",
            by=by,
        )


def _with_execution(
    rt: CycleServices, store: Store, *, broker: Optional[str] = None, session_id: Optional[str] = None
) -> CycleServices:
    if rt.execution is None:
        rt.execution = execution_for(store, rt.config, broker, session_id=session_id)
    if rt.memory is None:
        rt.memory = MemoryBank(store.memories)
    if rt.llm_cache is None:
        rt.llm_cache = store.llm_cache
    return rt


def recall_for(services: CycleServices, session_id: str):
    """What agents recall from: a replay's recording, else the bank under the configured mode (none when off)."""
    if services.recall is not None:
        return services.recall
    if services.memory is None or services.config.memory == "off":
        return None
    settings = services.config
    return MemoryRecall(
        services.memory, settings.memory, session_id, settings.memory_top_k, settings.input_window.recall_days
    )


def cycle_run_config(
    services: CycleServices,
    *,
    thread_id: str,
    handler: Optional[AuditHandler],
    writer: Optional[BufferedEventWriter],
    run_name: str,
    metadata: dict,
    session_id: str,
) -> tuple[dict, CycleContext]:
    """The run config and the run context of one cycle; replay builds its own with this too, so it runs under the
    same rules (the token budget, recursion limit) as the recording. What the cycle runs with travels in the
    context (graph/machine/cycle_context.py); the config holds only LangGraph's and LangChain's own (the thread, the
    audit callback, the run's name and metadata)."""
    context = CycleContext(
        services,
        audit_writer=writer,
        recall=recall_for(services, session_id),
        # a backtest's budget is its services', shared by its cycles; a cycle's own is fresh
        budget=services.budget if services.budget is not None else Budget.of(services.config),
        cache=services.llm_cache if services.config.llm_cache else None,
    )
    config = {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": 25,
        "run_name": run_name,
        "metadata": metadata,
        "callbacks": [handler] if handler else [],
    }
    return config, context


def _invoke(
    graph, inputs: Any, *, store: Store, services: CycleServices, session_id: str, cycle_id: str, audit: bool
) -> CycleOutcome:
    """An audited cycle runs under a lease (database/running.py): a deletion of its session refuses while it is
    live, and a forced one fences it, so what the cycle would write after it (events, head, fill) is removed and
    the cycle stops."""
    if not audit:
        return _run(graph, inputs, store=store, services=services, session_id=session_id, cycle_id=cycle_id, lease=None)
    lease = store.running.start(session_id, cycle_id)
    entered = running.entered(lease)
    try:
        return _run(
            graph, inputs, store=store, services=services, session_id=session_id, cycle_id=cycle_id, lease=lease
        )
    finally:
        running.left(entered)
        lease.end()


def _run(
    graph,
    inputs: Any,
    *,
    store: Store,
    services: CycleServices,
    session_id: str,
    cycle_id: str,
    lease: Optional[running.Lease],
) -> CycleOutcome:
    audit = lease is not None
    # written continuously off the graph's thread, so the barrier before EXECUTING waits only for the tail
    writer = store.writer() if audit else None
    if writer is not None and lease is not None:
        writer.events = running.FencedEvents(writer.events, lease)  # type: ignore[assignment]
    handler = AuditHandler(writer, session_id, cycle_id) if audit else None
    config, context = cycle_run_config(
        services,
        thread_id=cycle_id,
        handler=handler,
        writer=writer,
        run_name="tradegraph-cycle",
        session_id=session_id,
        metadata={"session_id": session_id, "cycle_id": cycle_id},
    )
    started = time.perf_counter()
    if writer is not None and not isinstance(inputs, Command):  # a resumed cycle has its manifest already
        # configuration and inputs: replay re-executes from this alone
        writer.put(new_event(session_id, cycle_id, "RUNNER", "manifest", build_manifest(services, inputs)))
    try:
        final = graph.invoke(inputs, config, context=context)
    except BaseException as e:
        if writer is not None and _stopped_before_resuming(graph, store, inputs, e, session_id, cycle_id):
            # a Ctrl-C before the approval was taken: nothing decided, nothing to record, the cycle still paused
            _close_quietly(writer)
            raise
        if writer is not None:
            # the crash itself is audited before it propagates; nothing of the cycle is lost
            try:
                writer.put(
                    new_event(session_id, cycle_id, "RUNNER", "error", {"type": type(e).__name__, "message": str(e)})
                )
                crashed = _crash_status(store, cycle_id)
                if crashed is not None:  # else the store cannot say whether it filled: readers infer from the log
                    writer.put(_ended(session_id, cycle_id, crashed))
                if crashed == "executed_with_errors":
                    mark_filled(e)
            finally:
                _close_quietly(writer)
        raise
    pending = final.get("__interrupt__")
    status: CycleStatus = "pending_approval" if pending else final.get("status") or "completed"
    if writer is not None and not pending:  # a paused cycle ends when it is resumed, in that call
        writer.put(_ended(session_id, cycle_id, status))
    audit_error = _close_quietly(writer) if writer is not None else None
    elapsed = time.perf_counter() - started
    contracts = {state: final[key] for state, key in CONTRACT_KEYS.items() if final.get(key) is not None}
    try:
        events = store.events.count(session_id) if audit else 0
    except PyMongoError:
        events = 0
    if audit and audit_error is None and not pending:
        for hook in AFTER_CYCLE:  # OpenTelemetry's live export, when imported (graph/services/telemetry/live.py)
            hook(store, session_id, cycle_id)
    return CycleOutcome(
        session_id=session_id,
        cycle_id=cycle_id,
        status=status,
        contracts=contracts,
        events=events,
        error=final.get("error"),
        llm_calls=handler.llm_calls if handler else 0,
        tokens=dict(handler.tokens) if handler else {},
        cached_calls=handler.cached_calls if handler else 0,
        cost=handler.spend.as_dict() if handler else {},
        elapsed_s=elapsed,
        audit_error=audit_error,
        notes=list(handler.retrievals) if handler else [],
    )


def _ended(session_id: str, cycle_id: str, status: CycleStatus) -> dict:
    """The cycle's last event: the status this call returns (the CLI prints it), so a reader never infers it."""
    return new_event(session_id, cycle_id, "RUNNER", "cycle_ended", {"status": status})


def _stopped_before_resuming(
    graph, store: Store, inputs: Any, error: BaseException, session_id: str, cycle_id: str
) -> bool:
    """A resumed cycle stopped by Ctrl-C (graph/machine/interrupts.py) as it entered EXECUTING, its checkpoint
    still waiting on the approval and no fill started: the answer was never taken."""
    if not (isinstance(inputs, Command) and stopped_before(error) == "EXECUTING"):
        return False
    try:
        return (
            _paused_cycle(graph, store, session_id, only=cycle_id) == cycle_id
            and _ledger_entry(store, cycle_id) is None
        )
    except Exception:  # noqa: BLE001 - unknown: audited as the crash it may be
        return False


def _crash_status(store: Store, cycle_id: str) -> Optional[CycleStatus]:
    """How a cycle that crashed out of the graph ended: `executed_with_errors` when the ledger holds its execution
    (committed, or pending and completed later), never `failed` for a cycle whose orders stand; None when the store
    cannot be asked (it may be what crashed)."""
    try:
        return "executed_with_errors" if _ledger_entry(store, cycle_id) is not None else "failed"
    except Exception:  # noqa: BLE001 - no answer is not "nothing executed"
        return None


def _ledger_entry(store: Store, cycle_id: str) -> Optional[dict]:
    return store.executions.get(cycle_id)


def _close_quietly(writer: BufferedEventWriter) -> Optional[str]:
    """Close the writer; a store that stopped taking events (they are spooled) comes back as a message
    for the outcome instead of hiding the cycle's result, which the user must see."""
    try:
        writer.close()
    except AuditSpooled as e:
        return str(e)
    return None
