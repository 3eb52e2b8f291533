"""Each capability's input and output, defined once: the Python client, HTTP (OpenAPI) and MCP (tool
schemas) all take their shapes from these models. Inputs forbid unknown fields, so a typo is bad input
instead of a silently ignored option."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from schemas.base import CycleStatus, RecordedStatus
from schemas.event_kinds import EventKind
from schemas.features import FeatureBundle
from schemas.memory import RetrievalHit
from schemas.portfolio import PortfolioView

__all__ = ["FeatureBundle", "PortfolioView"]  # features' and portfolio's outputs are the contracts themselves

SessionId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:\-]{1,200}$")]
TaskId = Annotated[str, StringConstraints(pattern=r"^t-[a-f0-9]{12}$")]
Day = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")]
# a ticker as typed; parse_symbols upper-cases it and the market data decides whether it exists
Ticker = Annotated[str, StringConstraints(min_length=1, max_length=12, pattern=r"^[A-Za-z][A-Za-z0-9.\-]*$")]
Market = Literal["us_equity", "cn_a_share", "crypto"]
MemoryMode = Literal["on", "off", "session"]
# when a backtest's decision points decide: at the close (on the day's whole bar, filled and marked at the close) or
# at the open (on the bars through the previous close and the day's open, filled and marked at the open: StockBench)
DecideAt = Literal["close", "open"]


# ---------------------------------------------------------------- names that become paths
def name_problem(name: Any) -> Optional[str]:
    """What is wrong with `name` as one entry inside a folder (a run's, a sweep's, an artifact's), or None. `.` and
    `..` pass any character class of names yet are the folder itself and its parent: `experiments/..` is the
    server's working directory."""
    if not isinstance(name, str):
        return None  # the type check says it
    if name in ("", ".", ".."):
        return "must be a name inside its folder, not the folder itself or its parent"
    if "/" in name or "\\" in name or "\x00" in name:
        return "must be a name inside its folder, not a path"
    return None


def _stays_in_folder(name: Any) -> Any:
    problem = name_problem(name)
    if problem is not None:
        raise PydanticCustomError("folder_name", problem)
    return name


def FolderName(max_length: int, chars: str = r"A-Za-z0-9_.\-") -> Any:
    """The one type of every id or name that becomes a folder or file name: the refusal of `.`, `..`, empty and
    paths runs first (a one-line reason), then the character class (shown in the JSON Schema)."""
    return Annotated[
        str, StringConstraints(pattern=rf"^[{chars}]{{1,{max_length}}}$"), BeforeValidator(_stays_in_folder)
    ]


if TYPE_CHECKING:  # a checker sees what they hold; pydantic sees the constraints
    RunId = str
    SweepId = str
    ArtifactName = str
    BenchmarkId = str
else:
    RunId = FolderName(100)
    SweepId = FolderName(80)  # its episodes' folders are `{sweep_id}-e000`: room for the suffix
    ArtifactName = FolderName(100)
    BenchmarkId = FolderName(80)  # its runs' folders and sessions are `{benchmark_id}-e000`: room for the suffix


def check_name(kind: Any, value: Any, label: str) -> Any:
    """`value` as `kind` (RunId, SweepId, …), else BadInput: one line naming `label` (a field, or a CLI flag)."""
    from graph.kernel.errors import BadInput, validation_line

    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as e:
        line, _ = validation_line(e)
        raise BadInput(f"{label}: {line.removeprefix('input: ')}", field=label.lstrip("-").replace("-", "_")) from None


def inside(folder: str | Path, name: str, field: str) -> Path:
    """folder/name once both are resolved (symlinks too), refused unless it is a direct child of folder: what a
    task may write to, checked again in the kernel whatever the input model let through."""
    from graph.kernel.errors import BadInput

    problem = name_problem(name)
    parent = Path(folder).expanduser().resolve()
    child = (parent / name).resolve() if problem is None else None
    if child is None or child.parent != parent:
        why = problem or f"resolves to {child}, outside {parent}"
        raise BadInput(f"{field} {name!r}: {why}", field=field)
    return child


# ---------------------------------------------------------------- idempotency keys
# a retried request's key (the Idempotency-Key header, MCP's and the client's idempotency_key): printable ASCII
# without spaces, as a UUID or any opaque token is
IdempotencyKey = Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,255}$")]
IDEMPOTENCY_KEY_HELP = (
    "a retry with the same key and the same request gets the first answer and starts nothing "
    "again; the same key with another request is refused (422); kept a day (docs/kernel.md)"
)


# a user's own data file, read by the process the kernel runs in (relative paths: against its working directory)
_DataPath = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"^[^\x00]+$")]
_ON_KERNEL = "a path on the machine the kernel runs on (relative: to its working directory)"
_DEFAULT = "default: the file a continued session or resumed backtest read, else the bundled"
PricesFile = Annotated[
    Optional[_DataPath],
    Field(
        description=(
            f"your own daily bars, CSV or Parquet (agent/data/README.md); {_ON_KERNEL}; {_DEFAULT} 2000-2013 sample"
        )
    ),
]
NewsFile = Annotated[
    Optional[_DataPath],
    Field(description=(f"your own headlines, JSONL (agent/data/README.md); {_ON_KERNEL}; {_DEFAULT} synthetic sample")),
]
FundamentalsFile = Annotated[
    Optional[_DataPath],
    Field(
        description=(f"your own fundamentals, JSON (agent/data/README.md); {_ON_KERNEL}; {_DEFAULT} synthetic sample")
    ),
]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- LLM spending
class LlmSpending(Input):
    """The response cache and the budgets of a run: per cycle on run_cycle, per whole run on start_backtest
    (agent/budget.py)."""

    no_cache: bool = Field(
        False,
        description="send every LLM request, never answer from the response cache "
        "(default: cached at temperature 0; $TRADEGRAPH_LLM_CACHE)",
    )
    max_tokens: Optional[int] = Field(
        None,
        ge=1,
        le=10**9,
        description=(
            "LLM tokens (input + output) allowed; the call that would cross it is not sent and the cycle fails "
            "(default: $TRADEGRAPH_MAX_TOKENS)"
        ),
    )
    max_cost: Optional[float] = Field(
        None,
        gt=0,
        le=1e9,
        description=("US dollars of LLM calls allowed, at agent/prices.toml's prices (default: $TRADEGRAPH_MAX_COST)"),
    )
    max_llm_calls: Optional[int] = Field(
        None,
        ge=1,
        le=10**9,
        description=("LLM requests allowed, retries included (default: $TRADEGRAPH_MAX_LLM_CALLS)"),
    )

    def config_overrides(self) -> dict[str, Any]:
        """agent.config.AgentConfig fields this input sets (None: the environment's)."""
        given = {"token_budget": self.max_tokens, "max_cost": self.max_cost, "max_llm_calls": self.max_llm_calls}
        return {**({"llm_cache": False} if self.no_cache else {}), **{k: v for k, v in given.items() if v is not None}}


# ---------------------------------------------------------------- cycles
class RunCycleInput(LlmSpending):
    symbols: list[Ticker] = Field(min_length=1, max_length=20, description='e.g. ["AAPL", "MSFT"]')
    as_of: Day = Field(description="YYYY-MM-DD, a trading day; only data on or before it is used")
    session_id: Optional[SessionId] = Field(None, description="continue this session (its portfolio carries over)")
    approve: bool = Field(False, description="pause before EXECUTING until approved")
    broker: Optional[Literal["sim", "alpaca"]] = Field(
        None,
        description="where orders go (default: $TRADEGRAPH_BROKER, else sim); a broker's mandate may require approval",
    )
    memory: Optional[MemoryMode] = Field(None, description="past notes agents recall (default: $TRADEGRAPH_MEMORY)")
    prices: PricesFile = None
    news: NewsFile = None
    fundamentals: FundamentalsFile = None


class ApprovalDecision(Input):
    approved: bool = Field(True, description="false rejects the paused cycle: nothing executes")
    by: str = Field("api", min_length=1, max_length=100, description="who decides; audited")
    comment: Optional[str] = Field(
        None, min_length=1, max_length=500, description="why, in the decider's words; audited with the decision"
    )


class ApproveInput(ApprovalDecision):
    session_id: SessionId


class CycleOutput(Output):
    session_id: str
    cycle_id: str
    status: CycleStatus = Field(
        description="how the cycle ended (README's status table); its `cycle_ended` event records the same"
    )
    contracts: dict[str, Any] = Field(description="state name -> its contract")
    events: int
    audit_error: Optional[str] = None
    error: Optional[dict[str, Any]] = None
    llm_calls: int = Field(0, description="LLM requests sent, failed attempts included")
    cached_calls: int = Field(0, description="LLM answers taken from the response cache: nothing sent")
    tokens: dict[str, int] = Field(default_factory=dict)
    cost: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "tokens and US dollars, in total and by_state: calls, cached_calls, input/output/cached/reasoning/total "
            "tokens, estimated_calls (no usage reported), unknown_cost_calls (no price: usd leaves them out), usd"
        ),
    )
    # set when this transport may not execute: why the cycle stopped before EXECUTING
    execution_disabled: Optional[str] = None
    notes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the past notes each agent recalled (agent, symbol, query, filter, hits), as audited",
    )

    def summary(self) -> dict[str, Any]:
        """What `tradegraph run --json` prints."""
        return self.model_dump(include={"session_id", "cycle_id", "status", "contracts", "events", "audit_error"})


# ---------------------------------------------------------------- audit log
SessionKind = Literal["run", "backtest", "replay", "studio", "other"]


class ListSessionsInput(Input):
    limit: int = Field(20, ge=1, le=1000)
    all: bool = Field(
        False, description="include replay sessions (replay-<session>-<n>, one per --verify), left out otherwise"
    )
    kind: Optional[SessionKind] = Field(
        None, description="only sessions of this kind (replay: replay sessions, without all)"
    )
    status: Optional[RecordedStatus] = Field(
        None,
        description="only sessions whose last cycle has this status "
        "(pending_approval: the ones waiting for a decision)",
    )


class SessionSummary(Output):
    """A session as its summary has it (database/sessions.py: a cache of the log, rebuilt by `store reindex`)."""

    session_id: str
    kind: SessionKind = Field(
        "other", description="run (s-…), backtest (bt-…), replay (replay-…), studio (studio-…) or other"
    )
    first_ts: Optional[float] = Field(None, description="when its first event was written (epoch seconds)")
    last_ts: Optional[float] = Field(None, description="when its last summarised event was written")
    events: int
    bytes: int = Field(0, description="its events' size as compact JSON, as the log returns them")
    cycles: int
    last_kind: Optional[str] = None
    last_state: Optional[str] = None
    last_cycle_id: Optional[str] = None
    status: Optional[str] = Field(None, description="the last cycle's status, as replay reads it from its events")
    symbols: list[str] = Field(default_factory=list, description="the last cycle's symbols")
    as_of: Optional[str] = Field(None, description="the last cycle's as-of date")
    replay_of: Optional[str] = Field(None, description="for a replay session: the session it re-executed")
    behind: int = Field(
        0,
        description="events the log holds past this summary: a cycle still running, or a "
        "writer stopped before it summarised (`tradegraph store reindex`)",
    )
    doubt: Optional[str] = Field(
        None,
        description="why the listed status is not vouched for: the log's hash chain "
        "broken when the summary was last rebuilt, the chain head recording "
        "another event than the one the summary ends at, or (with "
        "TRADEGRAPH_AUDIT_KEY) a head missing or not signed by it; "
        "`replay SESSION --check-chain` says more",
    )


class SessionsOutput(Output):
    sessions: list[SessionSummary]
    replays_hidden: bool = Field(False, description="replay sessions were left out (ask with all)")
    unsummarised: int = Field(
        0,
        description="at least this many sessions have events but no summary yet (a "
        "first cycle running, a writer killed in it, a store written before "
        "summaries): `tradegraph store reindex` adds them",
    )


class RetentionOptions(Input):
    dry_run: bool = Field(False, description="list what would be deleted and delete nothing")
    keep_memories: bool = Field(False, description="leave the notes its cycles wrote (default: deleted with it)")
    by: str = Field("api", min_length=1, max_length=100, description="who deletes; recorded in the admin log")
    force: bool = Field(
        False,
        description="delete a session with a cycle in flight, a task running or written to "
        "in the last minute too (a running cycle is fenced: what it writes after "
        "the deletion is removed and it stops); prune: sessions paused waiting "
        "for approval too",
    )


class DeleteSessionInput(RetentionOptions):
    session_id: SessionId


class PruneSessionsInput(RetentionOptions):
    older_than: str = Field(
        pattern=r"^[1-9][0-9]{0,8}[smhdw]$",
        description=("sessions last written longer ago than this: a whole number and s, m, h, d or w (30d, 12h)"),
    )
    kind: Optional[SessionKind] = Field(None, description="only sessions of this kind (default: every kind)")


class DeletedSession(Output):
    session_id: str
    kind: str
    events: int
    cycles: int
    bytes: int
    first_ts: Optional[float] = None
    last_ts: Optional[float] = None
    head: Optional[dict[str, Any]] = Field(None, description="its chain head as it stood (tradegraph export head)")
    replay_of: Optional[str] = None
    admin_seq: Optional[int] = Field(None, description="the admin log record of its deletion (none on a dry run)")
    removed: dict[str, int] = Field(default_factory=dict, description="documents removed, by collection")


class DeletionOutput(Output):
    dry_run: bool
    sessions: list[DeletedSession] = Field(
        description="each session deleted (or, on a dry run, that would be), a session's replay sessions after it"
    )
    note: Optional[str] = None


class EventsQuery(Input):
    cycle_id: Optional[SessionId] = None
    kind: Optional[EventKind] = None
    limit: int = Field(1000, ge=1, le=100_000)
    offset: int = Field(0, ge=0)


class ReadEventsInput(EventsQuery):
    session_id: SessionId


class UnreadableEvent(Output):
    seq: int
    reason: str = Field(description="why its payload cannot be read (its pack is missing or was edited)")


class EventsOutput(Output):
    session_id: str
    total: int = Field(description="events matching the filter, before limit/offset")
    offset: int
    events: list[dict[str, Any]] = Field(description="state_events documents in seq order")
    unreadable: list[UnreadableEvent] = Field(
        default_factory=list,
        description="events of this page listed as stored, not in full: their payload's pack is missing or was "
        "edited (`replay --verify` checks the whole log)",
    )


class SessionInput(Input):
    session_id: SessionId


class ReplayOutput(Output):
    """graph.services.replay.SessionLog.to_dict(): the session rebuilt from state_events alone."""

    session_id: str
    events: int
    cycles: list[dict[str, Any]]
    first_ts: Optional[float] = None
    last_ts: Optional[float] = None
    seq_gaps: list[list[int]]
    schema_versions: list[int]
    replay_of: Optional[str] = None
    chain: Optional[dict[str, Any]] = None
    gap_free: bool
    warnings: list[str]

    def session(self):
        """Back into the graph.services.replay.SessionLog it was dumped from (what the CLI's tables and HTML page read):
        its derived fields (gap_free, warnings, cut_off) are recomputed by the SessionLog itself."""
        from graph.services.replay.session import Cycle, LlmCall, SessionLog, ToolCall

        cycles = [
            _dataclass(
                Cycle,
                c,
                llm_calls=[_dataclass(LlmCall, x) for x in c["llm_calls"]],
                tool_calls=[_dataclass(ToolCall, x) for x in c["tool_calls"]],
            )
            for c in self.cycles
        ]
        return _dataclass(SessionLog, self.model_dump(), cycles=cycles, seq_gaps=[tuple(g) for g in self.seq_gaps])


class VerifyOutput(Output):
    session_id: str
    replay_session_id: str
    ok: bool = Field(description="identical and the recording's hash chain intact")
    identical: bool
    cycles: list[dict[str, Any]]
    warnings: list[str]
    chain: Optional[dict[str, Any]] = None
    unreadable: list[str] = Field(
        [],
        description="events that are not events this code knows (an unknown kind, a "
        "payload unlike its kind's), one line each: the session is "
        "not verified",
    )
    first_divergence: Optional[dict[str, Any]] = None

    def report(self):
        """Back into the graph.services.replay.VerifyReport it was dumped from (ok, identical and first_divergence are
        the report's own properties again)."""
        from graph.services.replay.session import CycleVerdict, Divergence, VerifyReport

        cycles = [
            _dataclass(CycleVerdict, c, divergences=[_dataclass(Divergence, d) for d in c["divergences"]])
            for c in self.cycles
        ]
        return _dataclass(VerifyReport, self.model_dump(), cycles=cycles)


def _dataclass(cls, data: dict[str, Any], **nested: Any):
    """A dataclass from its asdict() form: the fields it has (derived extras dropped), nested ones given."""
    from dataclasses import fields

    return cls(**{**{f.name: data[f.name] for f in fields(cls) if f.name in data}, **nested})


# ---------------------------------------------------------------- data and contracts
class FeaturesQuery(Input):
    as_of: Day
    market: Market = "us_equity"
    prices: PricesFile = None
    news: NewsFile = None
    fundamentals: FundamentalsFile = None


class FeaturesInput(FeaturesQuery):
    symbol: Ticker


class MemoryQuery(Input):
    query: str = Field(min_length=1, max_length=500, description='words to match, e.g. "stop uptrend"')
    as_of: Day = Field(description="only memories known before this date (point in time)")
    session_id: Optional[SessionId] = Field(None, description="only this session's memories")
    k: int = Field(5, ge=1, le=50)


class MemorySearchInput(MemoryQuery):
    symbol: Ticker


class MemorySearchOutput(Output):
    query: str
    filter: dict[str, Any]
    hits: list[RetrievalHit]


class SchemasInput(Input):
    name: Optional[str] = Field(None, max_length=100, description="one contract by name; all when omitted")


class SchemasOutput(Output):
    schemas: dict[str, dict[str, Any]]


class StoreStatusInput(Input):
    pass


class StoreStatusOutput(Output):
    backend: Literal["embedded", "mongodb", "mongomock"]
    uri: str = Field(description="redacted")
    ok: bool
    ping_ms: Optional[float] = None
    error: Optional[str] = Field(None, description="why the store did not answer, when ok is false")
    embedded: Optional[dict[str, Any]] = Field(None, description="the embedded server's pid, port, home")


# ---------------------------------------------------------------- tasks
class BacktestInput(LlmSpending):
    symbols: list[Ticker] = Field(min_length=1, max_length=20)
    start: Day
    end: Day
    every: int = Field(1, ge=1, le=260, description="decide every N trading days")
    capital: float = Field(100_000.0, gt=0, lt=1e12)
    fees_bps: float = Field(1.0, ge=0, le=1000)
    slippage_bps: float = Field(2.0, ge=0, le=1000)
    market: Market = "us_equity"
    memory: MemoryMode = "session"
    run_id: Optional[RunId] = Field(None, description="resume this run if its folder exists; new id when omitted")
    prices: PricesFile = None
    news: NewsFile = None
    fundamentals: FundamentalsFile = None


# ---------------------------------------------------------------- sweeps (graph/services/sweep/)
class ListWindows(Input):
    kind: Literal["list"]
    spans: list[tuple[Day, Day]] = Field(min_length=1, max_length=1000, description="[[start, end], ...]")


class _WindowRange(Input):
    """The span rolling and walk-forward windows are cut from."""

    start: Day
    end: Day


class RollingWindows(_WindowRange):
    kind: Literal["rolling"]
    length: int = Field(ge=2, le=10_000, description="sessions of the market's calendar in each window")
    step: int = Field(ge=1, le=10_000, description="sessions between window starts (< length: they overlap)")


class WalkForwardWindows(_WindowRange):
    kind: Literal["walk_forward"]
    train: int = Field(ge=1, le=10_000, description="in-sample sessions before each test window")
    test: int = Field(ge=2, le=10_000, description="sessions in each out-of-sample window, back to back")


Windows = Annotated[ListWindows | RollingWindows | WalkForwardWindows, Field(discriminator="kind")]


class ModelChoice(Input):
    quick: str = Field(min_length=1, max_length=200, description="`provider:model` of the quick tier")
    deep: Optional[str] = Field(None, min_length=1, max_length=200, description="deep tier (default: quick's)")


class OverrideSet(Input):
    """One configuration's settings over the sweep's own; the risk limits are agent/risk_limits.toml's."""

    label: Optional[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.=\-]{1,40}$")]] = None
    capital: Optional[float] = Field(None, gt=0, lt=1e12)
    fees_bps: Optional[float] = Field(None, ge=0, le=1000)
    slippage_bps: Optional[float] = Field(None, ge=0, le=1000)
    market: Optional[Market] = None
    every: Optional[int] = Field(None, ge=1, le=260)
    decide_at: Optional[DecideAt] = None
    risk_per_trade_pct: Optional[float] = Field(None, gt=0, le=100)
    daily_loss_cap_pct: Optional[float] = Field(None, gt=0, le=100)
    max_notional_pct: Optional[float] = Field(None, gt=0, le=100)
    max_positions: Optional[int] = Field(None, ge=1, le=100)
    exposure_cap_pct: Optional[float] = Field(None, gt=0, le=100)


class SweepInput(LlmSpending):
    """A grid of backtests: universes × memory modes × models × override sets, each over every window. The
    budgets (max_tokens, max_cost, max_llm_calls) hold for the whole sweep, across all workers."""

    sweep_id: Optional[SweepId] = Field(
        None, description="resume this sweep if it exists (same grid); new id when omitted"
    )
    universes: list[Annotated[list[Ticker], Field(min_length=1, max_length=20)]] = Field(min_length=1, max_length=50)
    windows: Windows
    memory: list[MemoryMode] = Field(["session"], min_length=1, max_length=3)
    models: list[ModelChoice] = Field(
        [], max_length=20, description="tiers per configuration (default: the configured ones)"
    )
    overrides: list[OverrideSet] = Field([], max_length=50)
    every: int = Field(5, ge=1, le=260, description="decide every N trading days")
    decide_at: DecideAt = Field(
        "close", description="decide, fill and mark at each session's close (default) or open (StockBench's protocol)"
    )
    capital: float = Field(100_000.0, gt=0, lt=1e12)
    fees_bps: float = Field(1.0, ge=0, le=1000)
    slippage_bps: float = Field(2.0, ge=0, le=1000)
    market: Market = "us_equity"
    workers: int = Field(2, ge=1, le=4096, description="episodes run at once")
    ray_address: Optional[str] = Field(
        None,
        max_length=500,
        description=(
            "join this Ray cluster (e.g. ray://head:10001 or auto); default: a local instance on this machine"
        ),
    )
    max_retries: int = Field(3, ge=0, le=20, description="Ray retries of an episode whose worker died")
    requests_per_minute: Optional[float] = Field(None, gt=0, le=1e7, description="per provider, all workers")
    tokens_per_minute: Optional[float] = Field(None, gt=0, le=1e10, description="per provider, all workers")
    prices: PricesFile = None
    news: NewsFile = None
    fundamentals: FundamentalsFile = None


# ---------------------------------------------------------------- benchmarks (graph/services/benchmark/)
StockBenchTree = Annotated[
    Optional[_DataPath],
    Field(
        description=(
            f"a StockBench data tree: a checkout, its storage/ folder or an archive of it; {_ON_KERNEL}; default: the "
            f"archive shipped with tradegraph"
        )
    ),
]


class BenchmarkInput(LlmSpending):
    """StockBench's protocol as tradegraph backtests (graph/services/benchmark/stockbench/): one run per model configuration,
    deciding, filling and marking at the open; the defaults are the paper's. The budgets (max_tokens, max_cost,
    max_llm_calls) hold for the whole benchmark, every run and worker together."""

    benchmark_id: Optional[BenchmarkId] = Field(
        None, description="resume this benchmark if it exists (same protocol, data and models); new id when omitted"
    )
    models: list[ModelChoice] = Field(
        [],
        max_length=20,
        description=(
            "one run per configuration, `provider:model` per tier (default: the configured tiers; offline without a key)"
        ),
    )
    symbols: Optional[list[Ticker]] = Field(
        None, min_length=1, max_length=20, description=("default: StockBench's 20 DJIA symbols")
    )
    start: Day = Field("2025-03-01", description="first day of the window (StockBench's: 2025-03-01)")
    end: Day = Field("2025-06-30", description="last day of the window (StockBench's: 2025-06-30)")
    memory: MemoryMode = Field("session", description="past notes agents recall: session (each run's own), on, off")
    data: StockBenchTree = None
    workers: int = Field(
        1,
        ge=1,
        le=4096,
        description=("runs at once: more than 1 spreads the configurations on Ray through the sweep machinery"),
    )
    runs: Optional[int] = Field(
        None,
        ge=1,
        le=10,
        description=(
            "runs per configuration, each a session of its own (default: 3 when a provider's model answers, at the "
            "protocol's temperature; 1 for the offline model, which is deterministic)"
        ),
    )
    temperature: Optional[float] = Field(
        None,
        ge=0,
        le=2,
        description=(
            "the sampling temperature a provider's model is sent (default: the paper's 0.7; another is printed as a "
            "departure; the offline model takes none)"
        ),
    )


class EstimateConfiguration(Output):
    name: str
    runs: int = Field(1, description="the runs of it priced (the benchmark's --runs, else 3 for a provider's model)")
    quick_model: str
    deep_model: str
    calls: int
    input_tokens: int
    output_tokens: int = Field(description="expected: the offline model's answers to the same requests")
    output_tokens_worst: int = Field(description="every call at its state's output cap")
    total_tokens: int
    usd: Optional[float] = Field(description="None when a tier's model has no price (never $0)")
    usd_worst: Optional[float]
    priced_as: dict[str, Optional[str]] = Field(description="tier -> the price table's name for its model")
    unpriced: list[str]


class BenchmarkEstimate(Output):
    """Projected calls, tokens and dollars of a benchmark, from a dry run with the offline model: no request sent."""

    benchmark: str
    window: dict[str, Any]
    symbols: list[str]
    per_point: dict[str, Any] = Field(description="one decision point's calls and tokens, in total and by state")
    configurations: list[EstimateConfiguration]
    total: dict[str, Any]
    output_cap: int = Field(description="the largest state's output cap")
    output_caps: dict[str, int] = Field({}, description="state -> the output cap each of its requests carries")
    prompt_tokens_per_symbol_decision: float
    dry_run: dict[str, Any]
    tokenizer: str
    output_assumption: str
    method: str


class LookaheadInput(Input):
    target: SessionId = Field(
        description="a session id, a backtest run id (its session bt-<id>) or a benchmark "
        "or sweep id (every run's session)"
    )


# what an audit_lookahead target named: a session, a backtest run, a benchmark or a sweep
LookaheadTarget = Literal["session", "run", "benchmark", "sweep"]


class LookaheadOutput(Output):
    """graph.services.replay.lookahead: every bar, news item, filing or memory a recorded cycle saw dated after its decision
    time."""

    target: str
    resolved: LookaheadTarget
    sessions: list[str]
    cycles: int
    checked: dict[str, int] = Field(description="pieces of evidence checked, by kind")
    leaks: list[dict[str, Any]]
    unaudited: list[dict[str, Any]] = Field(description="cycles nothing says the decision time of")
    broken: list[dict[str, Any]] = Field(
        [],
        description="sessions whose hash chain is broken: {session_id, seq, "
        "reason}; their log is no evidence of what was seen",
    )
    clean: bool = Field(description="every session's hash chain intact, no leak and every cycle audited")


TaskStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]


class TaskProgress(Output):
    done: int = 0
    total: int = 0
    date: Optional[str] = None
    equity: Optional[float] = None
    trades: int = 0
    eta_s: Optional[float] = None
    # a sweep counts episodes (done = succeeded); a backtest decision points
    unit: Literal["points", "episodes"] = "points"
    running: int = 0
    failed: int = 0
    elapsed_s: Optional[float] = None


class TaskView(Output):
    task_id: str
    kind: str
    status: TaskStatus
    progress: TaskProgress
    params: dict[str, Any]
    run_id: Optional[str] = None
    run_dir: Optional[str] = None
    owner: dict[str, Any] = Field(default_factory=dict, description="host, pid of the serving process")
    created_at: float
    updated_at: float
    heartbeat_at: Optional[float] = None
    cancel_requested: bool = False
    error: Optional[str] = None
    resumable: bool = Field(False, description="an interrupted or cancelled run continues where it stopped")
    summary: Optional[dict[str, Any]] = None


class TaskInput(Input):
    task_id: TaskId


class ListTasksInput(Input):
    limit: int = Field(20, ge=1, le=1000)


class TasksOutput(Output):
    tasks: list[TaskView]


class Artifact(Output):
    name: str
    path: str
    bytes: int
    media_type: str


class ArtifactsOutput(Output):
    task_id: str
    run_dir: Optional[str]
    artifacts: list[Artifact]
    metrics: Optional[dict[str, Any]] = Field(None, description="result.json's metrics once the run completed")
