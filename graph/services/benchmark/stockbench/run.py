"""The StockBench benchmark driver: the paper's protocol run as tradegraph backtests, one per model configuration,
then scored beside the equal-weight buy-and-hold and the published rows (scorecard.py).

Each configuration is one resumable backtest (graph/services/backtest/loop.py `run_backtest`): decisions, fills and marks at
the open on the StockBench data, in the audit session `bt-<benchmark id>-e<n>`. The configurations are expanded by
the sweep's own grid (graph/services/sweep/grid.py), so `workers > 1` hands exactly these episodes to the sweep's Ray driver
and one worker runs the same episodes here, in order, without importing Ray: the two give the same runs, and a
benchmark started one way resumes the other. Everything lives under experiments/<benchmark id>/: benchmark.json
(what a resume must match), episodes/<run id>/ (each run's backtest files) and the scorecard.

The budgets (max_tokens, max_cost, max_llm_calls) hold for the whole benchmark: one SharedLimits for every run,
in this process or as the sweep's Ray actor, checked before each call as a backtest's own budget is.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, Optional

from graph.services.benchmark.stockbench.protocol import TEMPERATURE, Protocol
from graph.services.run_files import read_run_text, run_file_exists, write_run_atomic
from graph.services.sweep.episode import SweepContext
from graph.services.sweep.grid import Episode

BENCHMARK_FILE = "benchmark.json"
MARKET: Literal["us_equity"] = "us_equity"
DECIDE_AT: Literal["open"] = "open"
# the look-ahead leaks kept in the scorecard (all are counted): enough to find and fix them, never megabytes
LEAKS_KEPT = 50


class BenchmarkError(ValueError):
    """Bad benchmark input; the message names the value and `field` the input it came from."""

    def __init__(self, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.field = field


class BenchmarkChanged(ValueError):
    """A benchmark id that exists with another protocol, data or models: resume it as it started, or use a new id."""


class BenchmarkCancelled(Exception):
    """Asked to stop: raised between decision points, so every run stays resumable."""


class BenchmarkIncomplete(RuntimeError):
    """A run ended without logging every decision point (its episode failed): nothing is scored."""


@dataclass(frozen=True)
class Configuration:
    """One model configuration: as given (None: the configured tiers) and as resolved for the scorecard."""

    quick: Optional[str]
    deep: Optional[str]
    quick_resolved: str
    deep_resolved: str
    # a provider answers at a temperature above 0 (the protocol's 0.7): its runs differ, so it is run 3 times
    sampling: bool = False
    temperature: Optional[float] = None  # what its provider tiers are sent; None: the offline model, which takes none

    @property
    def name(self) -> str:
        tiers = (
            self.quick_resolved
            if self.quick_resolved == self.deep_resolved
            else f"{self.quick_resolved}/{self.deep_resolved}"
        )
        return f"tradegraph ({tiers})"


@dataclass
class BenchmarkPlan:
    benchmark_id: str
    protocol: Protocol
    configurations: list[Configuration]
    episodes: list[Episode]
    days: list[str]  # the decision dates every run decides on
    ctx: SweepContext  # the sweep's context: data files, store address, cache switch
    workers: int = 1
    limits: dict[str, Any] = field(default_factory=dict)  # graph.services.sweep.limits.SharedLimits' keyword arguments
    max_retries: int = 3

    @property
    def dir(self) -> Path:
        return Path(self.ctx.experiments) / self.benchmark_id

    @property
    def total_points(self) -> int:
        return len(self.days) * len(self.episodes)

    def name_of(self, ep: Episode) -> str:
        return self.configurations[ep.index].name


# ------------------------------------------------------------------------------------------------ planning
def resolve_models(
    models: Sequence[tuple[Optional[str], Optional[str]]],
    *,
    check_ready: bool = True,
    temperature: float = TEMPERATURE,
    chosen: bool = False,
) -> list[Configuration]:
    """Each (quick, deep) as the runs will use it; (None, None) is the configured tiers (offline without a key).
    A configuration a provider answers is sent `temperature` (the protocol's unless the user chose one); one the
    offline model answers takes none, and a temperature the user `chosen` for it alone is bad input. With
    check_ready, a provider that is not ready (package, key, endpoint) is bad input naming the model."""
    from agent.config import AgentConfig, ConfigError

    out = []
    for quick, deep in models or [(None, None)]:
        deep = deep or quick
        try:
            settings = AgentConfig.from_env(quick_model=quick, deep_model=deep)
            resolved = (settings.quick_model, settings.deep_model)
            sent = temperature if _provider_answers(settings) else None
            sampling = bool(sent)
        except ConfigError as e:
            if check_ready or quick is None:
                raise BenchmarkError(f"models: {quick or 'the configured model'}: {e}", field="models") from None
            from agent.providers import OFFLINE_MODELS

            resolved = (quick, deep or quick)  # an estimate needs only the names to price them (and count its runs)
            sent = None if all(name in OFFLINE_MODELS for name in resolved) else temperature
            sampling = bool(sent)
        out.append(Configuration(quick, deep, *resolved, sampling=sampling, temperature=sent))
    if len({(c.quick_resolved, c.deep_resolved) for c in out}) != len(out):
        raise BenchmarkError("models: the same configuration is named twice", field="models")
    if chosen and check_ready and all(c.temperature is None for c in out):
        raise BenchmarkError(
            f"temperature {temperature:g}: the offline model takes none (it is deterministic); "
            f"name a provider's model with --model",
            field="temperature",
        )
    return out


def _provider_answers(settings) -> bool:
    from agent.providers import OFFLINE, tier_model

    return any(tier_model(settings, t, with_profile=False).provider != OFFLINE for t in ("quick", "deep"))


def runs_of(configurations: list[Configuration], runs: Optional[int]) -> int:
    """--runs, else 3 when a provider's model answers at a temperature above 0 (the paper's 3 runs a model at 0.7),
    else 1: the offline model (and a provider at a chosen temperature 0) gives the same run again."""
    return runs if runs is not None else (3 if any(c.sampling for c in configurations) else 1)


def load_data(data: Optional[str]):
    """The StockBench tree's DataFiles (every kind, dividends included) and its MarketData."""
    from agent.data.market import DataError
    from agent.data.sources import load_file, stockbench_files

    try:
        files = stockbench_files(data)
        if files.prices is None:
            raise DataError(f"{data or 'the StockBench data'}: no prices")
        return files, load_file("prices", files.prices)
    except DataError as e:
        raise BenchmarkError(f"data: {e}", field="data") from None


def days_of(market, protocol: Protocol) -> list[str]:
    """The protocol's decision dates on this data, refused (naming the value) when it cannot run at all."""
    from agent.data.market import DataError
    from graph.services.backtest.loop import decision_dates, validate_config

    for t in protocol.symbols:
        try:
            market._check(t)  # an unknown symbol names the data searched
        except DataError as e:
            raise BenchmarkError(f"symbols: {e}", field="symbols") from None
    try:
        validate_config(episode_config_of(protocol, "check"), market)
    except ValueError as e:
        raise BenchmarkError(str(e), field="start") from None
    return decision_dates(market, list(protocol.symbols), protocol.start, protocol.end, 1, MARKET, DECIDE_AT)


def episode_config_of(
    protocol: Protocol, episode_id: str, every: int = 1, start: Optional[str] = None, end: Optional[str] = None
):
    from schemas.simulation import EpisodeConfig

    return EpisodeConfig(
        episode_id=episode_id,
        tickers=list(protocol.symbols),
        initial_cash=protocol.initial_cash,
        start=start or protocol.start,
        end=end or protocol.end,
        every=every,
        fees_bps=protocol.fees_bps,
        slippage_bps=protocol.slippage_bps,
        market=MARKET,
        memory=protocol.memory,
        decide_at=DECIDE_AT,
    )


def expand_episodes(
    benchmark_id: str, protocol: Protocol, configurations: list[Configuration], runs: int = 1
) -> list[Episode]:
    """`runs` episodes per configuration over the protocol's one window, through the sweep's grid: one run keeps the
    grid's ids (a benchmark from before --runs resumes), more are <id>-r1, -r2, … with the configuration's index."""
    from graph.services.sweep.grid import expand

    grid = SimpleNamespace(
        universes=[list(protocol.symbols)],
        memory=[protocol.memory],
        overrides=[],
        market=MARKET,
        every=1,
        models=[SimpleNamespace(quick=c.quick, deep=c.deep) for c in configurations if c.quick is not None],
        windows={"kind": "list", "spans": [[protocol.start, protocol.end]]},
        capital=protocol.initial_cash,
        fees_bps=protocol.fees_bps,
        slippage_bps=protocol.slippage_bps,
        decide_at=DECIDE_AT,
    )
    if any(c.quick is None for c in configurations) and len(configurations) > 1:
        raise BenchmarkError(
            "models: the configured model cannot be one of several configurations: name each one as provider:model",
            field="models",
        )
    # each run of a configuration a provider answers is sent its temperature, and every run decides on the
    # protocol's input window (both recorded in every run's manifest)
    episodes = [
        dataclasses.replace(ep, temperature=configurations[ep.index].temperature, input_window=protocol.input_window)
        for ep in expand(grid, benchmark_id)
    ]
    if runs == 1:
        return episodes
    return [dataclasses.replace(ep, episode_id=f"{ep.episode_id}-r{r}") for ep in episodes for r in range(1, runs + 1)]


def plan(
    benchmark_id: str,
    protocol: Protocol,
    models: Sequence[tuple[Optional[str], Optional[str]]],
    *,
    experiments: str | Path,
    data: Optional[str] = None,
    workers: int = 1,
    store_uri: Optional[str] = None,
    store_home: Optional[str] = None,
    task_id: Optional[str] = None,
    limits: Optional[dict[str, Any]] = None,
    no_cache: bool = False,
    runs: Optional[int] = None,
) -> BenchmarkPlan:
    """Everything refusable refused before anything runs: the data, the symbols and window on it, the models (each
    provider ready), and a benchmark id that exists with another protocol, data or models (BenchmarkChanged).
    Writes experiments/<id>/benchmark.json on first use."""
    from graph.services.sweep.grid import grid_hash

    configurations = resolve_models(
        models, temperature=protocol.model_temperature, chosen=protocol.temperature is not None
    )
    files, market = load_data(data)
    days = days_of(market, protocol)
    episodes = expand_episodes(benchmark_id, protocol, configurations, runs_of(configurations, runs))
    experiments = str(Path(experiments).expanduser().resolve())
    ctx = SweepContext(
        sweep_id=benchmark_id,
        task_id=task_id,
        experiments=experiments,
        store_uri=store_uri,
        store_home=store_home,
        data=files.given(),
        no_cache=no_cache,
    )
    out = BenchmarkPlan(
        benchmark_id, protocol, configurations, episodes, days, ctx, workers=workers, limits=dict(limits or {})
    )
    identity = {
        "benchmark": "stockbench",
        "benchmark_id": benchmark_id,
        "grid_hash": grid_hash(episodes),
        "data": files.prices,
        "models": [[c.quick_resolved, c.deep_resolved] for c in configurations],
    }
    _claim(
        out.dir / BENCHMARK_FILE,
        identity,
        {
            "protocol": {
                **protocol.__dict__,
                "symbols": list(protocol.symbols),
                "input_window": dataclasses.asdict(protocol.input_window),
            },
            "sessions": days,
            "episodes": [{**e.as_dict(), "name": out.name_of(e)} for e in episodes],
        },
    )
    return out


_WHAT = {
    "grid_hash": "settings (symbols, window, memory, temperature, news and recall inputs or model configurations)",
    "data": "data",
    "models": "models (the configured tiers resolve differently now)",
}


def _claim(path: Path, identity: dict[str, Any], details: dict[str, Any]) -> None:
    if run_file_exists(path):
        before = {k: json.loads(read_run_text(path)).get(k) for k in identity}
        changed = [_WHAT.get(k, k) for k in identity if before[k] != identity[k]]
        if changed:
            raise BenchmarkChanged(
                f"benchmark '{identity['benchmark_id']}' exists with other "
                f"{' and '.join(changed)} ({path}): resume it as it started, or give a new "
                f"benchmark id"
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_run_atomic(path, json.dumps({**identity, **details}, indent=2, sort_keys=True) + "\n")


def episodes_of(benchmark_dir: Path) -> list[dict[str, Any]]:
    """The runs a benchmark folder names (its benchmark.json), for the look-ahead audit of a benchmark id."""
    return json.loads(read_run_text(benchmark_dir / BENCHMARK_FILE))["episodes"]


# ------------------------------------------------------------------------------------------------ running
class Progress:
    """Decision points done over the whole benchmark (every run), with the date and equity of the last one and an
    ETA from this process's pace (a resumed benchmark starts past zero)."""

    def __init__(self, total: int, report: Callable[[dict[str, Any]], None]):
        self.total, self.report = total, report
        self.started = time.monotonic()
        self.first: Optional[int] = None  # the points done when this process began: the ETA's pace starts there
        self.failed = 0

    def update(
        self,
        done: int,
        *,
        date: Optional[str] = None,
        equity: Optional[float] = None,
        running: int = 1,
        trades: int = 0,
    ) -> None:
        if self.first is None:
            self.first = done if date is None else done - 1
        elapsed = time.monotonic() - self.started
        new = done - self.first
        eta = round(elapsed / new * (self.total - done), 1) if new > 0 else None
        self.report(
            {
                "done": done,
                "total": self.total,
                "date": date,
                "equity": equity,
                "trades": trades,
                "eta_s": 0.0 if done >= self.total else eta,
                "unit": "points",
                "running": running,
                "failed": self.failed,
                "elapsed_s": round(elapsed, 1),
            }
        )


def logged_points(plan: BenchmarkPlan, ep: Episode) -> int:
    from graph.services.backtest.loop import load_logs

    return len(load_logs(plan.ctx.episodes_dir / ep.episode_id / "episode_log.jsonl"))


def failed_points(plan: BenchmarkPlan) -> int:
    """Decision points logged as failed across every run (a line scan: cheap enough to repeat each second)."""
    total = 0
    for ep in plan.episodes:
        path = plan.ctx.episodes_dir / ep.episode_id / "episode_log.jsonl"
        if run_file_exists(path):
            total += read_run_text(path).count('"action":"failed"')
    return total


def run(
    plan: BenchmarkPlan,
    store,
    *,
    on_progress: Callable[[dict[str, Any]], None] = lambda p: None,
    cancel_requested: Callable[[], bool] = lambda: False,
) -> None:
    """Run (or resume) every configuration; returns once each has logged every decision point. Raises
    BenchmarkCancelled when asked to stop (between points: resumable) and BenchmarkIncomplete when a run ended
    short (a Ray episode that failed); a store that goes away stops it with the backtest's own error."""
    progress = Progress(plan.total_points, on_progress)
    progress.failed = failed_points(plan)  # a resumed benchmark's earlier failures still count
    progress.update(sum(logged_points(plan, ep) for ep in plan.episodes), running=0)
    if plan.workers > 1:
        _run_on_ray(plan, store, progress, cancel_requested)
    else:
        _run_here(plan, store, progress, cancel_requested)
    short = [ep for ep in plan.episodes if logged_points(plan, ep) < len(plan.days)]
    if short:
        raise BenchmarkIncomplete(
            f"run {short[0].episode_id} ({plan.name_of(short[0])}) logged "
            f"{logged_points(plan, short[0])} of {len(plan.days)} decision points"
        )


def _run_here(plan: BenchmarkPlan, store, progress: Progress, cancel_requested: Callable[[], bool]) -> None:
    """One run after another in this process: Ray is not imported."""
    from graph.services.backtest.loop import run_backtest
    from graph.services.sweep.episode import episode_config, episode_services, provider_of
    from graph.services.sweep.limits import SharedLimits, SweepBudget

    shared = SharedLimits(**plan.limits) if any(v for v in plan.limits.values()) else None
    before = 0
    for ep in plan.episodes:
        rt = episode_services(ep, plan.ctx)
        # one budget for the whole benchmark: each run's earlier spending is counted once when it resumes
        budget = SweepBudget(shared, ep.episode_id, provider_of(rt.config), call=lambda x: x) if shared else None
        trades = [0]

        def on_step(entry, base=before, trades=trades) -> None:
            trades[0] += len(entry.exits) + len(entry.execution_result.executed_trades)
            progress.failed += entry.action == "failed"
            progress.update(base + entry.decision_point_idx + 1, date=entry.date, equity=entry.equity, trades=trades[0])
            if cancel_requested():
                raise BenchmarkCancelled()

        if cancel_requested():
            raise BenchmarkCancelled()
        run_backtest(
            episode_config(ep),
            store,
            progress=False,
            services=rt,
            out_dir=plan.ctx.episodes_dir,
            run_id=ep.episode_id,
            on_step=on_step,
            budget=budget,
        )
        before += len(plan.days)


def _run_on_ray(plan: BenchmarkPlan, store, progress: Progress, cancel_requested: Callable[[], bool]) -> None:
    """The sweep's driver runs the episodes as Ray tasks (graph/services/sweep/driver.py); decision points are counted from
    the episodes' own progress documents, so the view moves per point, not per run."""
    from graph.services.sweep.driver import SweepPlan, run_sweep
    from graph.services.sweep.episode import COLLECTION

    ids = [ep.episode_id for ep in plan.episodes]
    sweep = SweepPlan(
        episodes=plan.episodes, ctx=plan.ctx, workers=plan.workers, max_retries=plan.max_retries, limits=plan.limits
    )

    def on_sweep(p: dict[str, Any]) -> None:
        done = {d["_id"]: int(d.get("done") or 0) for d in store.db[COLLECTION].find({"_id": {"$in": ids}})}
        points = sum(max(done.get(ep.episode_id, 0), logged_points(plan, ep)) for ep in plan.episodes)
        progress.failed = failed_points(plan)
        progress.update(points, running=int(p.get("running") or 0))

    summary = run_sweep(sweep, on_progress=on_sweep, cancel_requested=cancel_requested)
    if summary["cancelled"]:
        raise BenchmarkCancelled()
    if summary["failed"]:
        first = summary["failed"][0]
        raise BenchmarkIncomplete(f"run {first['episode_id']} failed: {first['error']}")


# ------------------------------------------------------------------------------------------------ scoring
def opens(market, symbols: Sequence[str], dates: Sequence[str]) -> dict[str, list[float]]:
    """Each symbol's open on each date; a date it has no bar on carries its last open forward (StockBench's
    forward fill), so the baseline never reads a price from after the date."""
    import pandas as pd

    out = {}
    for s in symbols:
        frame = market.bars(s, None, dates[-1])
        series = frame["open"].reindex(frame.index.union(pd.DatetimeIndex(dates))).ffill()
        values = [float(series.loc[pd.Timestamp(d)]) for d in dates]
        if any(v != v for v in values):  # NaN: no open on or before the first date
            raise BenchmarkError(f"symbols: {s} has no open on or before {dates[0]}", field="symbols")
        out[s] = values
    return out


def sent_temperature(store, session_id: str) -> Any:
    """The temperature a run's tiers were sent, as its first manifest records it: one value, or {tier: value} when
    they differ; None for the offline model (or a model that takes none)."""
    from schemas.events import ManifestEvent, parse_event

    found = store.events.read(session_id, kind="manifest")
    if not found:
        return None
    manifest = parse_event(found[0])  # an unreadable manifest is named, never read as "no temperature"
    models = manifest.payload.models if isinstance(manifest, ManifestEvent) else None
    sent = {tier: m.get("temperature") for tier, m in (models or {}).items()}
    values = list(dict.fromkeys(sent.values()))
    return values[0] if len(values) <= 1 and values else (sent or None)


def lookahead_summary(report) -> dict[str, Any]:
    d = report.as_dict()
    return {
        "cycles": d["cycles"],
        "checked": d["checked"],
        "leaks": len(d["leaks"]),
        "leak_lines": [leak.line() for leak in report.leaks[:LEAKS_KEPT]],
        "unaudited": d["unaudited"],
        "clean": not d["leaks"] and not d["unaudited"],
    }


def score(plan: BenchmarkPlan, store, *, elapsed_s: Optional[float] = None) -> tuple[dict[str, Any], list[Path]]:
    """The scorecard of the complete runs: written to experiments/<id>/ (json, csv, png) and returned."""
    from agent.data.sources import load_file
    from graph.services.backtest.loop import logged_result, session_id_of
    from graph.services.benchmark.stockbench import scorecard
    from graph.services.replay.lookahead import audit_sessions
    from graph.services.sweep.episode import episode_config

    runs, session_ids = [], []
    for ep in plan.episodes:
        result = logged_result(episode_config(ep), plan.ctx.episodes_dir / ep.episode_id)
        if result is None:  # run() returns once every run logged every point: a run with none is not complete
            raise BenchmarkIncomplete(f"run {ep.episode_id} ({plan.name_of(ep)}) logged no decision point")
        sid = session_id_of(ep.episode_id)
        head = store.events.heads.get(sid)
        session_ids.append(sid)
        record = scorecard.RunRecord(plan.name_of(ep), result, (sid,), (head.public() if head else None,))
        runs.append(
            {
                **scorecard.run_row(record, plan.protocol.initial_cash),
                "run_id": ep.episode_id,
                "temperature": sent_temperature(store, sid),
            }
        )
    market = load_file("prices", plan.ctx.data["prices"])
    baseline = scorecard.baseline_row(plan.days, opens(market, plan.protocol.symbols, plan.days), plan.protocol)
    from graph.services.benchmark.stockbench import rigour

    cash = plan.protocol.initial_cash
    baseline["sub_periods"] = rigour.sub_periods(baseline["nav"], cash)
    for ep, row in zip(plan.episodes, runs):
        c = plan.configurations[ep.index]
        row["vs_buy_and_hold"] = rigour.paired_test(row["nav"], baseline["nav"], cash)
        row["sub_periods"] = rigour.sub_periods(row["nav"], cash)
        row.update(rigour.may_have_seen([c.quick_resolved, c.deep_resolved], plan.days[0]))
    # a configuration run more than once: its runs' mean and standard deviation, each run's row beside it
    by_config: dict[int, list[dict[str, Any]]] = {}
    for ep, row in zip(plan.episodes, runs):
        by_config.setdefault(ep.index, []).append(row)
    runs = []  # each configuration's runs, then the row of their mean beside them
    for index, rows in by_config.items():
        runs += rows
        if len(rows) > 1:
            for k, row in enumerate(rows, 1):
                row["name"] = f"{row['name']} run {k}"
            name = plan.configurations[index].name
            runs.append(
                {
                    "name": f"{name} (mean of {len(rows)})",
                    "kind": "run_mean",
                    **rigour.spread(rows),
                    "run_ids": [r["run_id"] for r in rows],
                    "temperature": rows[0].get("temperature"),
                    "may_have_seen_window": rows[0].get("may_have_seen_window"),
                }
            )
    audit = lookahead_summary(audit_sessions(store, session_ids))
    card = scorecard.build(plan.protocol, plan.days, runs, baseline, elapsed_s=elapsed_s, lookahead=audit)
    # a provider's model that takes no temperature (a reasoning model) samples at its own default: said, not hidden
    wanted = plan.protocol.model_temperature
    for index, c in enumerate(plan.configurations):
        ids = {ep.episode_id for ep in plan.episodes if ep.index == index}
        sent = {json.dumps(r["temperature"]) for r in runs if r["kind"] == "run" and r["run_id"] in ids}
        if c.temperature is not None and sent != {json.dumps(wanted)}:
            card["departures"].insert(
                0,
                f"temperature: {c.name} was sent {', '.join(sorted(sent))} (a model that "
                f"takes none samples at its own default), the protocol's is {wanted:g}",
            )
    card["benchmark_id"] = plan.benchmark_id
    card["data"] = plan.ctx.data["prices"]
    return card, scorecard.write(card, plan.dir)
