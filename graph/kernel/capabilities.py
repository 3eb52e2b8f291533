"""The capabilities: plain functions, each with one Pydantic input and one output model, registered once.

A capability gets a Context (the store, this transport's policy, the task manager, a services factory)
and its validated input; it returns its output model or raises. Every exception is mapped onto the
kernel's five kinds by kernel.errors.translate, in Kernel.call, never here.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel

from graph.kernel import backtest_tasks, benchmark_tasks, sweep_tasks  # each registers its task kind
from graph.kernel import broker_models as bm
from graph.kernel import models as m
from graph.kernel.errors import BadInput, Conflict, Forbidden, NotFound
from graph.kernel.inputs import data_files, with_spending
from graph.kernel.policy import ALWAYS_EXECUTES, Policy


@dataclass(frozen=True)
class Route:
    """Where a capability lives over HTTP. The rest is derived (graph/transports/routes.py): the fields the path
    names are path parameters, typed by the input model; the other fields are the JSON body of a POST, or the query
    string of a GET or DELETE; the response is the output model; a keyed capability takes an Idempotency-Key."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    tag: str  # the OpenAPI tag that groups it
    status: int = 200  # 202 for one that starts a task and returns at once
    # fields an HTTP request must state though the model defaults them: a decision is never implied by an empty
    # body (a browser's body-less cross-origin POST must not approve). The HTTP client sends the default it was
    # called with; in-process, the CLI and MCP keep the model's default
    explicit: tuple[str, ...] = ()

    @classmethod
    def get(cls, path: str, tag: str) -> Route:
        return cls("GET", path, tag)

    @classmethod
    def post(cls, path: str, tag: str, status: int = 200, explicit: tuple[str, ...] = ()) -> Route:
        return cls("POST", path, tag, status, explicit)

    @classmethod
    def delete(cls, path: str, tag: str) -> Route:
        return cls("DELETE", path, tag)

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)

    @property
    def body(self) -> bool:
        """The fields outside the path travel in a JSON body (else in the query string)."""
        return self.method == "POST"


@dataclass(frozen=True)
class Capability:
    name: str
    fn: Callable[[Context, Any], BaseModel]
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    http: Route
    moves_book: bool
    description: str
    # it starts something (a cycle, a decision, a task) a retried request would start again: it takes an
    # idempotency key (graph/kernel/idempotent.py)
    keyed: bool = False
    # it deletes stored sessions: off over HTTP and MCP unless the policy allows it (Policy.deletion_refusal)
    deletes: bool = False


@dataclass
class Context:
    store: Any  # database.connection.Store
    policy: Policy
    tasks: Any  # kernel.tasks.TaskManager
    # (memory mode, agent.data.sources.DataFiles or None) -> a fresh graph.machine.cycle_context.CycleServices
    services: Callable[..., Any]


# every transport derives from this: MCP's tools, HTTP's endpoints and OpenAPI document, the client's methods
CAPABILITIES: dict[str, Capability] = {}


def capability(
    input_model: type[BaseModel],
    output_model: type[BaseModel],
    *,
    http: Route,
    moves_book: bool = False,
    keyed: bool = False,
    deletes: bool = False,
):
    """Register the function as a capability: its models, its HTTP route and its policy flags, all in one place."""

    def register(fn):
        doc = " ".join(inspect.cleandoc(fn.__doc__ or fn.__name__).split("\n\n")[0].split())  # the first paragraph
        cap = Capability(fn.__name__, fn, input_model, output_model, http, moves_book, doc, keyed, deletes)
        _check_route(cap)
        CAPABILITIES[fn.__name__] = cap
        return fn

    return register


def _check_route(cap: Capability) -> None:
    """A route that cannot be derived is a programming error: refused when the module loads, not at a request."""
    fields = cap.input_model.model_fields
    for p in cap.http.path_params:
        if p not in fields or not fields[p].is_required():
            raise TypeError(
                f"{cap.name}: path parameter {{{p}}} must be a required field of {cap.input_model.__name__}"
            )
    for other in CAPABILITIES.values():
        if other.name != cap.name and (other.http.method, other.http.path) == (cap.http.method, cap.http.path):
            raise TypeError(f"{cap.name}: {cap.http.method} {cap.http.path} is already {other.name}'s route")


def _jsonable(obj: Any) -> Any:
    """What a transport can send: the CLI's `default=str` rule, applied once here for every transport."""
    return json.loads(json.dumps(obj, default=str))


# ------------------------------------------------------------------------------------------------ cycles
def _cycle_output(out, disabled: Optional[str]) -> m.CycleOutput:
    if disabled is not None:
        where = (
            (
                "paused before EXECUTING (checkpointed): approve it with `tradegraph approve "
                f"{out.session_id}` or the in-process client"
            )
            if out.status == "pending_approval"
            else f"ended {out.status} without executing"
        )
        disabled = f"{disabled}; the cycle {where}"
    return m.CycleOutput(
        session_id=out.session_id,
        cycle_id=out.cycle_id,
        status=out.status,
        contracts=_jsonable(out.contracts),
        events=out.events,
        audit_error=out.audit_error,
        error=_jsonable(out.error),
        llm_calls=out.llm_calls,
        tokens=dict(out.tokens),
        cached_calls=out.cached_calls,
        cost=_jsonable(out.cost),
        execution_disabled=disabled,
        notes=_jsonable(out.notes),
    )


@capability(m.RunCycleInput, m.CycleOutput, http=Route.post("/cycles", "cycles"), moves_book=True, keyed=True)
def run_cycle(ctx: Context, inp: m.RunCycleInput) -> m.CycleOutput:
    """Run one audited trading cycle (SCANNING → … → MEMORIZING); with approve, pause before EXECUTING."""
    from graph.machine.runner import run_state_machine as _run
    from graph.services.telemetry import live  # noqa: F401 - each cycle exported when configured

    refusal = ctx.policy.execution_refusal()
    # execution off on this transport: the same pause as --approve, so the cycle stops before EXECUTING,
    # resumable by someone allowed to move the book
    data = data_files(inp, ctx.store, inp.session_id, ctx.policy)
    _check_broker(inp.broker)  # a bad broker setting is bad input before any model call
    out = _run(
        inp.symbols,
        inp.as_of,
        store=ctx.store,
        session_id=inp.session_id,
        services=with_spending(ctx.services(inp.memory, data), inp),
        approve=inp.approve or refusal is not None,
        broker=inp.broker,
    )
    return _cycle_output(out, refusal)


@capability(
    m.ApproveInput,
    m.CycleOutput,
    http=Route.post("/sessions/{session_id}/approval", "cycles", explicit=("approved",)),
    moves_book=True,
    keyed=True,
)
def approve(ctx: Context, inp: m.ApproveInput) -> m.CycleOutput:
    """Approve (or reject) the session's cycle paused before EXECUTING; a rejection executes nothing."""
    from graph.machine.runner import approve_cycle
    from graph.services.telemetry import live  # noqa: F401 - each cycle exported when configured

    refusal = ctx.policy.execution_refusal()
    if refusal is not None and inp.approved:  # rejecting moves nothing: allowed everywhere
        raise Forbidden(f"approve refused: {refusal}", field="approved")
    # a network caller is audited with its transport; a person at this machine by name alone
    by = inp.by if ctx.policy.transport in ALWAYS_EXECUTES else f"{inp.by} (via {ctx.policy.transport})"
    out = approve_cycle(
        inp.session_id, store=ctx.store, approved=inp.approved, by=by, services=ctx.services(None), comment=inp.comment
    )
    return _cycle_output(out, None)


# ------------------------------------------------------------------------------------------------ audit log
@capability(m.ListSessionsInput, m.SessionsOutput, http=Route.get("/sessions", "audit"))
def list_sessions(ctx: Context, inp: m.ListSessionsInput) -> m.SessionsOutput:
    """Recent sessions, newest first, from their summaries (never the log): kind, events, bytes, cycles, and the
    last cycle's status, symbols and as-of; replay sessions only with all; of one kind or last status if asked."""
    listing = ctx.store.sessions.list(
        inp.limit, replays=inp.all or inp.kind == "replay", kind=inp.kind, status=inp.status
    )
    fields = m.SessionSummary.model_fields
    out = [
        m.SessionSummary(
            **{k: v for k, v in s.items() if k in fields},
            behind=listing.behind.get(s["session_id"], 0),
            doubt=listing.doubt.get(s["session_id"]),
        )
        for s in listing.sessions
    ]
    return m.SessionsOutput(sessions=out, replays_hidden=not inp.all, unsummarised=listing.unsummarised)


def _deletions(
    ctx: Context, inp: m.DeleteSessionInput | m.PruneSessionsInput, plan, reason: str, note: Optional[str] = None
) -> m.DeletionOutput:
    """Delete the plan (or, dry, show it), recorded in the admin log as done by `by` on this transport."""
    from database.retention import Retention, SessionActive

    if not inp.dry_run:
        refusal = ctx.policy.deletion_refusal()
        if refusal is not None:
            raise Forbidden(refusal, field="dry_run")
        by = inp.by if ctx.policy.transport in ALWAYS_EXECUTES else f"{inp.by} (via {ctx.policy.transport})"
        try:
            plan = Retention(ctx.store).delete(
                plan, by=by, reason=reason, keep_memories=inp.keep_memories, force=inp.force
            )
        except SessionActive as e:
            raise Conflict(str(e), field="session_id") from None
    return m.DeletionOutput(dry_run=inp.dry_run, sessions=[m.DeletedSession(**d.as_dict()) for d in plan], note=note)


@capability(m.DeleteSessionInput, m.DeletionOutput, http=Route.delete("/sessions/{session_id}", "audit"), deletes=True)
def delete_session(ctx: Context, inp: m.DeleteSessionInput) -> m.DeletionOutput:
    """Delete a session and its replays (events, summary, book, ledger, checkpoints, memories unless kept), recorded
    in the admin log with its chain head; dry_run lists what would go."""
    from database.retention import Retention, UnknownSession

    try:
        plan = Retention(ctx.store).plan_delete(inp.session_id)
    except UnknownSession as e:
        raise NotFound(str(e), field="session_id") from None
    return _deletions(ctx, inp, plan, reason="sessions delete")


@capability(m.PruneSessionsInput, m.DeletionOutput, http=Route.post("/sessions/prune", "audit"), deletes=True)
def prune_sessions(ctx: Context, inp: m.PruneSessionsInput) -> m.DeletionOutput:
    """Delete every session last written longer ago than older_than (of one kind, or any), as delete_session does
    each; dry_run lists what would go."""
    from database.retention import Retention, parse_duration

    retention = Retention(ctx.store)
    plan = retention.plan_prune(parse_duration(inp.older_than), inp.kind)
    withheld: list = []
    if not inp.force:  # a cycle in flight or waiting for a person is never pruned unless forced
        plan, withheld = retention.withhold(plan)
    unsummarised = ctx.store.sessions.list(1).unsummarised
    notes = (
        [
            f"at least {unsummarised} session(s) have no summary and were not considered: `tradegraph store "
            f"reindex` adds them"
        ]
        if unsummarised
        else []
    )
    notes += [f"kept {sid}: it {why}; --force prunes it too" for sid, why in withheld]
    note = "; ".join(notes) or None
    reason = f"sessions prune --older-than {inp.older_than}" + (f" --kind {inp.kind}" if inp.kind else "")
    return _deletions(ctx, inp, plan, reason=reason, note=note)


@capability(m.ReadEventsInput, m.EventsOutput, http=Route.get("/sessions/{session_id}/events", "audit"))
def read_events(ctx: Context, inp: m.ReadEventsInput) -> m.EventsOutput:
    """A session's state_events in seq order, optionally one cycle's or one kind's, paged."""
    if not ctx.store.events.exists(inp.session_id):
        raise NotFound(f"unknown session '{inp.session_id}'", field="session_id")
    from schemas.event_kinds import split_kind, stored_kinds

    if inp.kind is not None and split_kind(inp.kind):
        from schemas.events import read_kind

        # an older log wrote dividends, exits, abstentions and approvals as `validation` events: the kind asked
        # for is the kind as read (the event itself is listed as stored, its hash chain's document)
        stored, unread = ctx.store.events.read_noting_unreadable(
            inp.session_id, kind=stored_kinds(inp.kind), cycle_id=inp.cycle_id
        )
        events = [e for e in stored if read_kind(e) == inp.kind]
    else:
        events, unread = ctx.store.events.read_noting_unreadable(inp.session_id, kind=inp.kind, cycle_id=inp.cycle_id)
    page = events[inp.offset : inp.offset + inp.limit]
    unreadable = [m.UnreadableEvent(seq=e["seq"], reason=unread[e["seq"]]) for e in page if e["seq"] in unread]
    return m.EventsOutput(
        session_id=inp.session_id,
        total=len(events),
        offset=inp.offset,
        events=_jsonable(page),
        unreadable=unreadable,
    )


def _market_only(files):
    """The prices a session read (its file, else the bundled sample), without the rest of a cycle's services: the
    model, memory, news and cache cost seconds to build and valuing a book needs none of them."""
    from agent.data.market import default_market_data
    from agent.data.sources import load_sources

    return load_sources(files).get("market") or default_market_data()


@capability(m.SessionInput, m.PortfolioView, http=Route.get("/sessions/{session_id}/portfolio", "audit"))
def portfolio(ctx: Context, inp: m.SessionInput) -> m.PortfolioView:
    """The session's book at its last as-of: positions with their levels and age, cash, equity, realised and
    unrealised P&L (fees included), valued on the prices the session read."""
    from graph.services.portfolio_view import NoPortfolio, portfolio_view, recorded_closes

    if ctx.store.portfolios.load(inp.session_id) is None and not ctx.store.events.exists(inp.session_id):
        raise NotFound(f"unknown session '{inp.session_id}'", field="session_id")
    market = None  # the closes it recorded value the book: its price file is not read (pandas costs seconds)
    if recorded_closes(ctx.store, inp.session_id) is None:
        from agent.data.market import DataError

        try:
            market = _market_only(data_files(inp, ctx.store, inp.session_id))
        except (BadInput, DataError):  # its price file moved or went away: the prices it recorded value the book
            market = None
    try:
        return portfolio_view(ctx.store, inp.session_id, market)
    except NoPortfolio:
        raise NotFound(
            f"no stored portfolio for session '{inp.session_id}' (a backtest keeps its book in its run "
            f"folder's trade history)",
            field="session_id",
        ) from None


@capability(m.SessionInput, m.ReplayOutput, http=Route.get("/sessions/{session_id}/replay", "audit"))
def replay(ctx: Context, inp: m.SessionInput) -> m.ReplayOutput:
    """The session rebuilt from state_events alone: cycles, contracts, LLM and tool calls, hash chain."""
    from graph.services.replay.session import read_session

    return m.ReplayOutput.model_validate(_jsonable(read_session(ctx.store, inp.session_id).to_dict()))


@capability(m.SessionInput, m.VerifyOutput, http=Route.post("/sessions/{session_id}/verify", "audit"))
def verify(ctx: Context, inp: m.SessionInput) -> m.VerifyOutput:
    """Re-execute every cycle from the recording alone (a new replay session) and compare the contracts."""
    from dataclasses import asdict

    from graph.services.replay.session import verify_session
    from graph.services.telemetry import live  # noqa: F401 - each cycle exported when configured

    report = verify_session(ctx.store, inp.session_id)
    first = report.first_divergence
    d = report.to_dict()
    return m.VerifyOutput.model_validate(_jsonable({**d, "first_divergence": asdict(first) if first else None}))


# ------------------------------------------------------------------------------------------------ data
@capability(m.FeaturesInput, m.FeatureBundle, http=Route.get("/features/{symbol}", "data"))
def features(ctx: Context, inp: m.FeaturesInput) -> m.FeatureBundle:
    """The FeatureBundle agents may cite for a symbol as known at the close of a date."""
    from agent.data.market import validate_as_of
    from agent.features.bundle import build_bundle

    rt = ctx.services(None, data_files(inp, policy=ctx.policy))
    symbol = inp.symbol.strip().upper()
    validate_as_of(rt.market, [symbol], inp.as_of, inp.market)
    return build_bundle(
        symbol,
        inp.as_of,
        market=rt.market,
        news=rt.news,
        fundamentals=rt.fundamentals,
        cache=rt.cache,
        profile=inp.market,
    )


@capability(m.SchemasInput, m.SchemasOutput, http=Route.get("/schemas", "data"))
def contract_schemas(ctx: Context, inp: m.SchemasInput) -> m.SchemasOutput:
    """JSON Schemas of the contracts (every one, or one by name)."""
    from schemas import ALL_CONTRACTS

    if inp.name is not None and inp.name not in ALL_CONTRACTS:
        raise NotFound(f"unknown contract '{inp.name}' (known: {', '.join(ALL_CONTRACTS)})", field="name")
    names = [inp.name] if inp.name else list(ALL_CONTRACTS)
    return m.SchemasOutput(schemas={n: ALL_CONTRACTS[n].model_json_schema() for n in names})


@capability(m.StoreStatusInput, m.StoreStatusOutput, http=Route.get("/store", "data"))
def store_status(ctx: Context, inp: m.StoreStatusInput) -> m.StoreStatusOutput:
    """Which store this server uses and whether it answers now."""
    from database import embedded
    from database.connection import redact

    s = ctx.store
    backend: Literal["embedded", "mongodb", "mongomock"] = (
        "mongomock"
        if s.uri.startswith("mongomock://")
        else "embedded"
        if s.target.startswith("embedded:")
        else "mongodb"
    )
    ok, ping_ms, error = True, None, None
    if backend != "mongomock":
        t0 = time.perf_counter()
        try:
            s.client.admin.command("ping")
            ping_ms = round((time.perf_counter() - t0) * 1000, 2)
        except Exception as e:  # noqa: BLE001 - reporting the outage is this capability's job
            ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    status = _jsonable(embedded.server_status(s.owned_server_home)) if backend == "embedded" else None
    return m.StoreStatusOutput(backend=backend, uri=redact(s.uri), ok=ok, ping_ms=ping_ms, error=error, embedded=status)


# ------------------------------------------------------------------------------------------------ tasks
@capability(m.BacktestInput, m.TaskView, http=Route.post("/backtests", "tasks", status=202), keyed=True)
def start_backtest(ctx: Context, inp: m.BacktestInput) -> m.TaskView:
    """Start (or, with an existing run_id, continue) a backtest as a task; returns at once with its id."""
    if inp.run_id is not None:  # the task writes experiments/<run_id>/: nowhere else, whatever let the id through
        m.inside(ctx.tasks.experiments, inp.run_id, "run_id")
    data_files(inp, policy=ctx.policy)  # refused by the transport's policy before the task reads anything
    return backtest_tasks.start(ctx.tasks, inp)


@capability(m.SweepInput, m.TaskView, http=Route.post("/sweeps", "tasks", status=202), keyed=True)
def start_sweep(ctx: Context, inp: m.SweepInput) -> m.TaskView:
    """Start (or, with an existing sweep_id, continue) a sweep of backtests on Ray as a task; returns at once."""
    if inp.ray_address and ctx.policy.transport not in ALWAYS_EXECUTES:
        # joining a cluster ships this process's configuration to it: the operator's call, not a remote caller's
        raise Forbidden(
            f"ray_address is not accepted over {ctx.policy.transport}: this server runs sweeps on a "
            f"local Ray instance (start it with `tradegraph sweep` on the cluster instead)",
            field="ray_address",
        )
    if inp.sweep_id is not None:
        m.inside(ctx.tasks.experiments, inp.sweep_id, "sweep_id")
    data_files(inp, policy=ctx.policy)  # refused by the transport's policy before the task reads anything
    return sweep_tasks.start(ctx.tasks, inp)


@capability(
    m.BenchmarkInput, m.TaskView, http=Route.post("/benchmarks/stockbench", "benchmarks", status=202), keyed=True
)
def start_benchmark(ctx: Context, inp: m.BenchmarkInput) -> m.TaskView:
    """Start (or, with an existing benchmark_id, continue) StockBench as a task: one backtest per model configuration
    at the open, then the scorecard beside buy-and-hold and the published rows; returns at once."""
    if inp.benchmark_id is not None:
        m.inside(ctx.tasks.experiments, inp.benchmark_id, "benchmark_id")
    _data_allowed(ctx, inp.data)
    return benchmark_tasks.start(ctx.tasks, inp)


@capability(m.BenchmarkInput, m.BenchmarkEstimate, http=Route.post("/benchmarks/stockbench/estimate", "benchmarks"))
def estimate_benchmark(ctx: Context, inp: m.BenchmarkInput) -> m.BenchmarkEstimate:
    """Projected LLM calls, tokens and dollars of a benchmark, from a dry run with the offline model on a throwaway
    store: no request is sent to any provider."""

    _data_allowed(ctx, inp.data)
    return m.BenchmarkEstimate.model_validate(benchmark_tasks.estimate(ctx.store, inp))


def _data_allowed(ctx: Context, path: Optional[str]) -> None:
    refusal = ctx.policy.data_refusal(path) if path else None
    if refusal is not None:
        raise Forbidden(f"data: {refusal}", field="data")


@capability(m.LookaheadInput, m.LookaheadOutput, http=Route.get("/audit/lookahead/{target}", "audit"))
def audit_lookahead(ctx: Context, inp: m.LookaheadInput) -> m.LookaheadOutput:
    """Every bar, news item, filing or memory a recorded cycle saw dated after its decision time, for a session, a
    backtest run, or every run of a benchmark or sweep."""
    from graph.services.replay.lookahead import audit_sessions

    resolved, sessions = benchmark_tasks.lookahead_sessions(ctx.store, ctx.tasks.experiments, inp.target)
    report = audit_sessions(ctx.store, sessions).as_dict()
    return m.LookaheadOutput(
        target=inp.target,
        resolved=resolved,
        sessions=sessions,
        cycles=report["cycles"],
        checked=report["checked"],
        leaks=report["leaks"],
        unaudited=report["unaudited"],
        broken=report["broken"],
        clean=not report["leaks"] and not report["unaudited"] and not report["broken"],
    )


@capability(m.TaskInput, m.TaskView, http=Route.get("/tasks/{task_id}", "tasks"))
def task_status(ctx: Context, inp: m.TaskInput) -> m.TaskView:
    """A task's status and progress (points done of total, equity, ETA); interrupted if its owner died."""
    return ctx.tasks.status(inp.task_id)


@capability(m.ListTasksInput, m.TasksOutput, http=Route.get("/tasks", "tasks"))
def list_tasks(ctx: Context, inp: m.ListTasksInput) -> m.TasksOutput:
    """Recent tasks, newest first."""
    return m.TasksOutput(tasks=ctx.tasks.list(inp.limit))


@capability(m.TaskInput, m.TaskView, http=Route.delete("/tasks/{task_id}", "tasks"))
def cancel_task(ctx: Context, inp: m.TaskInput) -> m.TaskView:
    """Ask a running task to stop after its current decision point (the run stays resumable)."""
    return ctx.tasks.cancel(inp.task_id)


@capability(m.TaskInput, m.TaskView, http=Route.post("/tasks/{task_id}/resume", "tasks", status=202))
def resume_task(ctx: Context, inp: m.TaskInput) -> m.TaskView:
    """Continue an interrupted, cancelled or failed backtest, sweep or benchmark where its logs end, in this process."""
    run_id = ctx.tasks.status(inp.task_id).run_id
    if run_id is not None:  # a document written before ids were checked (or edited in the store) is not run outside
        m.inside(ctx.tasks.experiments, run_id, "run_id")
    return ctx.tasks.resume(inp.task_id)


@capability(m.TaskInput, m.ArtifactsOutput, http=Route.get("/tasks/{task_id}/artifacts", "tasks"))
def task_artifacts(ctx: Context, inp: m.TaskInput) -> m.ArtifactsOutput:
    """A task's files (a backtest's trade history, episode log, result and equity PNG; a sweep's results; a
    benchmark's scorecard), its folder and its metrics."""
    run_dir = ctx.tasks.status(inp.task_id).run_dir
    if run_dir:  # the files listed (and served over HTTP) are read from the folder the task document names
        m.inside(Path(run_dir).parent, Path(run_dir).name, "run_dir")
    return ctx.tasks.artifacts(inp.task_id)


# ------------------------------------------------------------------------------------------------ memory
@capability(m.MemorySearchInput, m.MemorySearchOutput, http=Route.get("/memory/{symbol}", "memory"))
def memory_search(ctx: Context, inp: m.MemorySearchInput) -> m.MemorySearchOutput:
    """Past reviews and notes of a symbol as an agent would recall them at a date (BM25 + dense, RRF k=60)."""
    from agent.data.market import parse_date
    from graph.machine.memory import MemoryBank

    as_of = parse_date(inp.as_of).strftime("%Y-%m-%d")  # a real date, or bad input naming it
    symbol = inp.symbol.strip().upper()
    bank = MemoryBank(ctx.store.memories)
    bank.refresh()
    hits = bank.search(inp.query, symbol=symbol, before=as_of, session_id=inp.session_id, k=inp.k)
    return m.MemorySearchOutput(
        query=inp.query,
        hits=hits,
        filter={"symbol": symbol, "known_before": as_of, "session_id": inp.session_id, "k": inp.k},
    )


# ------------------------------------------------------------------------------------------------ broker
def _check_broker(given: Optional[str] = None) -> str:
    from agent.brokers import BrokerConfigError
    from agent.brokers.settings import check_broker_env

    try:
        return check_broker_env(given=given)
    except BrokerConfigError as e:
        raise BadInput(str(e), field="broker") from None


def _broker() -> Any:
    """The configured broker (ALPACA_*), or bad input when there is none to ask."""
    from agent.brokers.alpaca import AlpacaBroker
    from agent.brokers.settings import alpaca_settings

    if _check_broker("alpaca") != "alpaca":
        raise BadInput("no broker configured", field="broker")
    return AlpacaBroker(alpaca_settings())


def _by(ctx: Context, by: str) -> str:
    return by if ctx.policy.transport in ALWAYS_EXECUTES else f"{by} (via {ctx.policy.transport})"


@capability(bm.BrokerHaltInput, bm.BrokerControlOutput, http=Route.post("/broker/halt", "broker"), moves_book=True)
def broker_halt(ctx: Context, inp: bm.BrokerHaltInput) -> bm.BrokerControlOutput:
    """Halt the broker: no process submits another order and no approval resumes a broker cycle until resumed;
    with cancel_open, every open tradegraph order at the broker is cancelled too. Audited with who and when."""
    from graph.services.broker.control import halt

    refusal = ctx.policy.execution_refusal()
    if refusal is not None:
        raise Forbidden(f"broker halt refused: {refusal}", field="by")
    state = halt(ctx.store, by=_by(ctx, inp.by), reason=inp.reason, broker=_broker() if inp.cancel_open else None)
    return bm.BrokerControlOutput(**{k: v for k, v in state.items() if k != "_id"})


@capability(bm.BrokerResumeInput, bm.BrokerControlOutput, http=Route.post("/broker/resume", "broker"), moves_book=True)
def broker_resume(ctx: Context, inp: bm.BrokerResumeInput) -> bm.BrokerControlOutput:
    """Lift the broker halt: submits and approvals of broker cycles may proceed again. Audited with who and when."""
    from graph.services.broker.control import resume

    refusal = ctx.policy.execution_refusal()
    if refusal is not None:
        raise Forbidden(f"broker resume refused: {refusal}", field="by")
    state = resume(ctx.store, by=_by(ctx, inp.by), reason=inp.reason)
    return bm.BrokerControlOutput(**{k: v for k, v in state.items() if k != "_id"})


@capability(bm.BrokerStatusInput, bm.BrokerStatusOutput, http=Route.get("/broker", "broker"))
def broker_status(ctx: Context, inp: bm.BrokerStatusInput) -> bm.BrokerStatusOutput:
    """The broker account (status, cash, buying power, equity), its positions, its open orders, and the halt."""
    from graph.services.broker.reconcile import status

    return bm.BrokerStatusOutput(**status(_broker(), ctx.store))


@capability(bm.BrokerReconcileInput, bm.BrokerReconcileOutput, http=Route.post("/broker/reconcile", "broker"))
def broker_reconcile(ctx: Context, inp: bm.BrokerReconcileInput) -> bm.BrokerReconcileOutput:
    """The broker's orders, positions and cash against the ledger: orders that moved on are recorded as late
    order_update events (their fills booked once), and whatever disagrees is listed as drift."""
    from graph.services.broker.reconcile import reconcile

    return bm.BrokerReconcileOutput(**reconcile(_broker(), ctx.store, inp.session_id))
