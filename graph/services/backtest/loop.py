"""The simulation loop (seed 004): one audited graph cycle per decision point.

For each decision point the simulation builds a Case from its own portfolio and point-in-time
data (bars dated on/before the decision date only), runs ONE graph cycle whose EXECUTING lands
in a SimulationExecution, extracts the decision (no submit_decision call -> hold, several -> the
last, rejected -> hold with every reason), marks the portfolio to market at the close and
appends a DecisionPointLog to experiments/{run_id}/episode_log.jsonl.

A run is resumable: the same run id continues after the last logged decision point, and ends
with the same trade_history.json bytes as an uninterrupted run. A point is logged only when its cycle was
decided with the store there to record it: a cycle the store went away under (its audit spooled, or it failed
on the store, as when a second Ctrl-C closes it) stops the run before its point is logged, and the resumed run
decides that point again (the old cycle marked superseded).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from pymongo.errors import (
    AutoReconnect,
    ConnectionFailure,
    InvalidOperation,
    NetworkTimeout,
    NotPrimaryError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
)

from agent.budget import Budget, Spending
from agent.config import AgentConfig
from agent.data.market import MarketData, parse_date
from agent.markets import bar_cutoff, fill_field, get_profile, trading_days
from agent.metrics import TRADING_DAYS, buy_and_hold_curve, summarize
from agent.pricing import Spend
from database.connection import Store
from database.errors import AuditSpooled, StoreUnavailable
from database.spool import pending_files
from graph.machine.cycle_context import CycleServices, default_services
from graph.machine.runner import run_state_machine
from graph.services.backtest.simulation import SimulationExecution
from graph.services.run_files import open_run_file, read_run_bytes, read_run_text, run_file_exists, write_run_atomic
from graph.services.telemetry import live as _live_export  # noqa: F401 - each cycle exported when configured
from schemas.decision import Decision, DecisionResult, ExecutedTrade
from schemas.events import ErrorEvent, new_event, parse_event
from schemas.portfolio import PortfolioSnapshot
from schemas.simulation import (
    Case,
    CaseData,
    CaseDataItem,
    CaseMetadata,
    DecisionPointLog,
    EpisodeConfig,
    EpisodeResult,
    EquityPoint,
    IntervalPriceSummary,
    PointAction,
    PricePoint,
    StockData,
    TradeHistory,
)

DEFAULT_EXPERIMENTS = Path("experiments")
FAILED_STATUSES = ("failed", "degraded")
# below this many decision points a year's worth of annualising is mostly noise (about three months daily)
SHORT_WINDOW_POINTS = 63


class BacktestError(ValueError):
    """Bad backtest input (unknown symbol, dates outside the data, a run id with another config)."""


class CycleNotAudited(StoreUnavailable):
    """The store went away during a decision point's cycle: its record is incomplete (the audit spooled) or it
    failed on the store, not on anything it decided. The point is not logged; the run stops there, resumable."""


# a cycle that failed with one of these failed because the store went away (or was closed under it), not on
# anything it decided: never that point's decision
STORE_FAULTS = frozenset(
    c.__name__
    for c in (
        StoreUnavailable,
        AuditSpooled,
        ConnectionFailure,
        AutoReconnect,
        NetworkTimeout,
        ServerSelectionTimeoutError,
        NotPrimaryError,
        WaitQueueTimeoutError,
        InvalidOperation,
    )
)


# ---------------------------------------------------------------- calendar and cases
def decision_dates(
    market: MarketData,
    tickers: list[str],
    start: str,
    end: str,
    every: int,
    profile: str = "us_equity",
    decide_at: str = "close",
) -> list[str]:
    """Every `every`-th session of the market's calendar in [start, end] on which at least one ticker can trade
    (a Shanghai holiday is no decision point even where US bars exist): it has a bar that day, and at the open
    a bar before it too (the bars a decision at the open reads end the session before). A ticker without one
    that day sits the point out (build_case)."""
    sessions = {d.strftime("%Y-%m-%d") for d in trading_days(profile, start, end)}
    traded: set = set()
    for t in tickers:
        dates = market.trading_dates(t, None if decide_at == "open" else start, end)
        traded |= {d.strftime("%Y-%m-%d") for d in dates[1 if decide_at == "open" else 0 :]}
    return sorted(sessions & traded)[::every]


def validate_config(config: EpisodeConfig, market: MarketData) -> None:
    known = set(market.universe())
    for t in config.tickers:
        if t not in known:
            raise BacktestError(f"unknown symbol '{t}' (known: {', '.join(sorted(known))})")
    for t in config.tickers:
        first, last = market.date_range(t)
        for name, value in (("start", config.start), ("end", config.end)):
            ts = parse_date(value)
            if ts < first or ts > last:
                raise BacktestError(f"{name} date {value} is outside the data for {t} ({first.date()}..{last.date()})")
    if not decision_dates(
        market, config.tickers, config.start, config.end, config.every, config.market, config.decide_at
    ):
        raise BacktestError(
            f"no session in {config.start}..{config.end} on which any of {','.join(config.tickers)} can trade"
        )


_BAR_FIELDS = ("open", "high", "low", "close", "volume")


def _bar(ts, row: list[float]) -> PricePoint:
    return PricePoint(timestamp=ts.strftime("%Y-%m-%d"), **dict(zip(_BAR_FIELDS, map(float, row))))


def build_case(
    config: EpisodeConfig,
    market: MarketData,
    date: str,
    idx: int,
    portfolio: PortfolioSnapshot,
    prev_date: Optional[str],
) -> Case:
    """A Case from point-in-time data only: the bars a decision on `date` may read whole (MarketData.as_of at
    the bar cutoff: through `date` at the close, through the session before at the open) and the price it fills
    at (`date`'s close, or its open). A ticker with no bar on `date` cannot trade: it is left out of the point's
    tickers and listed as untradable with the reason, in the Case and in an item the planner reads."""
    profile = get_profile(config.market, config.decide_at)
    cutoff = bar_cutoff(profile, date)
    stock: dict[str, StockData] = {}
    untradable: dict[str, str] = {}
    for t in config.tickers:
        today = market.bars(t, date, date)
        # only the rows the case reads are copied (the whole history only for the first point's window), never
        # the full history per ticker and point: the last bars_in_case bars, and those since the last point
        seen = market.position_as_of(t, cutoff)
        since = 0 if prev_date is None else market.position_as_of(t, bar_cutoff(profile, prev_date))
        frame = market.as_of(t, cutoff, lookback=seen - min(since, max(0, seen - config.bars_in_case)))
        if today.empty or frame.empty:
            untradable[t] = untradable_reason(market, t, date, today.empty)
            continue
        tail = frame.iloc[-config.bars_in_case :]
        bars = [_bar(ts, row) for ts, row in zip(tail.index, tail[list(_BAR_FIELDS)].to_numpy().tolist())]
        # the bars after the last point's cutoff (prev_date None: all of them), else the last one
        window = frame.iloc[max(0, since - (seen - len(frame))) :]
        window = window if len(window) else frame.iloc[-1:]
        summary = IntervalPriceSummary(
            start=window.index[0].strftime("%Y-%m-%d"),
            end=window.index[-1].strftime("%Y-%m-%d"),
            open=float(window.open.iloc[0]),
            high=float(window.high.max()),
            low=float(window.low.min()),
            close=float(window.close.iloc[-1]),
            volume=float(window.volume.sum()),
        )
        stock[t] = StockData(
            ticker=t, current_price=float(today[fill_field(profile)].iloc[0]), daily_bars=bars, interval_summary=summary
        )
    items = [CaseDataItem(kind="other", timestamp=date, content=f"{t}: {why}") for t, why in untradable.items()]
    return Case(
        case_id=f"{config.episode_id}:{idx}",
        tickers=list(stock),
        case_data=CaseData(items=items),
        stock_data=stock,
        portfolio=portfolio,
        untradable=untradable,
        metadata=CaseMetadata(decision_point_idx=idx, information_cutoff_timestamp=date),
    )


def untradable_reason(market: MarketData, ticker: str, date: str, no_bar_today: bool) -> str:
    last = market.as_of(ticker, date, lookback=1)
    if not no_bar_today:
        return f"its first bar is on {date}: no earlier bar to decide on at the open, so it cannot trade today"
    since = f"; its last bar is {last.index[-1].date()} (close {float(last.close.iloc[-1]):g})" if len(last) else ""
    return f"no bar on {date}: it cannot trade today and is never filled at a stale price{since}"


def point_prices(config: EpisodeConfig, market: MarketData, case: Case, date: str) -> dict[str, float]:
    """What each ticker is marked at after the point's trades: the price orders fill at that day (its close, or
    its open), or for a ticker without a bar that day its last close before it (never its cost)."""
    field = fill_field(get_profile(config.market, config.decide_at))
    prices = {}
    for t in config.tickers:
        if t in case.stock_data:
            prices[t] = case.stock_data[t].current_price
            continue
        today = market.bars(t, date, date)
        prices[t] = float(today[field].iloc[0]) if len(today) else float(market.as_of(t, date).close.iloc[-1])
    return prices


def mark_to_market(portfolio: PortfolioSnapshot, prices: dict[str, float]) -> tuple[float, float]:
    """(equity, invested fraction) at the given closes."""
    invested = sum(p.quantity * prices[s] for s, p in portfolio.positions.items())
    equity = portfolio.cash + invested
    return equity, (invested / equity if equity > 0 else 0.0)


# ---------------------------------------------------------------- decision extraction
def extract(
    outcome, sim: SimulationExecution, portfolio: PortfolioSnapshot
) -> tuple[PointAction, Decision, DecisionResult, PortfolioSnapshot, dict[str, Any]]:
    """Seed 004's rules: no submit_decision -> hold; several -> the last; rejected -> hold (every reason)."""
    calls = sim.calls_for(outcome.cycle_id)
    deciding = outcome.contracts.get("DECIDING") or {}
    output: dict[str, Any] = {
        "cycle_id": outcome.cycle_id,
        "cycle_status": outcome.status,
        "submit_calls": len(calls),
        "rationale": str(deciding.get("rationale", ""))[:500],
    }
    if outcome.error:
        output["error"] = outcome.error
    if outcome.cost:  # logged per point, so a resumed run's total still counts the points run before
        output["llm_cost"] = outcome.cost
    if outcome.status in FAILED_STATUSES and not calls:
        # no decision was made: recorded as a failure, never as a hold the agent chose
        why = (outcome.error or {}).get("message", "") or "no error recorded"
        return (
            "failed",
            Decision(),
            DecisionResult(status="rejected", message=f"cycle {outcome.status}: {why}"),
            portfolio,
            output,
        )
    if calls:
        last = calls[-1]
        if last.result.status == "accepted":
            action: PointAction = "trade" if last.result.executed_trades else "hold"
            return action, last.decision, last.result, last.portfolio_after, output
        msg = f"hold: submit_decision rejected: {last.result.message}"
        return "rejected", last.decision, DecisionResult(status="rejected", message=msg), portfolio, output
    proposed = Decision(orders=deciding.get("orders") or [])
    validation = outcome.contracts.get("VALIDATING") or {}
    if validation and not validation.get("passed", True):
        reasons = validation.get("reasons") or [
            c.get("detail", c.get("name")) for c in validation.get("checks", []) if not c.get("passed")
        ]
        msg = "hold: VALIDATING rejected the decision: " + "; ".join(reasons or ["no reason recorded"])
        return "rejected", proposed, DecisionResult(status="rejected", message=msg), portfolio, output
    why = f"cycle {outcome.status}" + (f": {outcome.error.get('message', '')}" if outcome.error else "")
    return (
        "hold",
        Decision(),
        DecisionResult(status="accepted", message=f"hold: no submit_decision call ({why})"),
        portfolio,
        output,
    )


# ---------------------------------------------------------------- files
def _write_atomic(path: Path, text: str) -> None:
    write_run_atomic(path, text)  # never through a link planted in the run folder (graph/services/run_files.py)


def trade_history_json(trades: list[ExecutedTrade]) -> str:
    return json.dumps(TradeHistory(trades=trades).model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def config_json(config: EpisodeConfig) -> str:
    return json.dumps(config.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def load_logs(path: Path) -> list[DecisionPointLog]:
    """The complete lines of an episode log; a torn last line (killed mid-write) is cut off."""
    if not run_file_exists(path):
        return []
    logs, good = [], 0
    raw = read_run_bytes(path)
    for line in raw.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            logs.append(DecisionPointLog.model_validate_json(line))
        except ValueError:
            break
        good += len(line)
    if good != len(raw):
        with open_run_file(path, "r+b") as f:
            f.truncate(good)
    return logs


# ---------------------------------------------------------------- progress
class _Progress:
    def __init__(self, total: int, done: int, enabled: bool):
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]{task.fields[date]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("equity {task.fields[equity]:>14,.2f}"),
            TextColumn("trades {task.fields[trades]:>5}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("backtest", total=total, completed=done, date="", equity=0.0, trades=0)

    def update(self, date: str, equity: float, trades: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, date=date, equity=equity, trades=trades)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# ---------------------------------------------------------------- the loop
def session_id_of(run_id: str) -> str:
    """The audit session a run's cycles are recorded in (a resumed run continues it)."""
    return f"bt-{run_id}"


def episode_services(
    config: EpisodeConfig,
    services: Optional[CycleServices],
    sim: SimulationExecution,
    budget: Optional[Spending] = None,
) -> CycleServices:
    base = services or default_services(AgentConfig.from_env())
    settings = dataclasses.replace(
        base.config,
        starting_cash=config.initial_cash,
        fees_bps=config.fees_bps,
        slippage_bps=config.slippage_bps,
        market=config.market,
        memory=config.memory,
        decide_at=config.decide_at,
    )
    # the budgets hold for the whole run (one Budget shared by its cycles), or for a whole sweep (given)
    return dataclasses.replace(
        base,
        config=settings,
        execution=sim,
        run_id=config.episode_id,
        _models={},
        _lock=threading.Lock(),
        budget=budget if budget is not None else Budget.of(settings, scope="backtest"),
    )


def _supersede_cut_off(store: Store, session_id: str, logs: list[DecisionPointLog]) -> None:
    """A process killed mid-cycle, a store that went away under a cycle, or a run stopped at once leaves that
    cycle cut off and its decision point unlogged; the resumed run decides the point again in a new cycle. Say
    so in the audit (once per cut-off cycle), so a reader never takes the cut-off cycle, or a fill it recorded,
    for the point's decision: the simulated book only ever moves by logged points. The notes it memorised are
    withdrawn too: recalled by the points after, they would make the resumed run decide otherwise than an
    uninterrupted one (the fault test caught this). The caller redelivers spooled events first, so the marker
    follows the whole old cycle."""
    cycles = store.events.cycle_ids(session_id)
    logged = {lg.agent_output.get("cycle_id") for lg in logs}
    last = max((i for i, c in enumerate(cycles) if c in logged), default=-1)
    for cycle_id in cycles[last + 1 :]:
        notes = [m.memory_id for m in store.memories.list(session_id=session_id, cycle_id=cycle_id, limit=0)]
        for memory_id in notes:
            store.memories.forget(memory_id=memory_id)
        errors = [parse_event(e) for e in store.events.read(session_id, kind="error", cycle_id=cycle_id)]
        if any(isinstance(e, ErrorEvent) and e.payload.type == "cycle_superseded" for e in errors):
            continue
        with store.writer(background=False) as writer:
            writer.put(
                new_event(
                    session_id,
                    cycle_id,
                    "RUNNER",
                    "error",
                    {
                        "type": "cycle_superseded",
                        "decision_point_idx": len(logs),
                        "withdrawn_memories": notes,
                        "message": f"cycle {cycle_id} was cut off before decision point {len(logs)} "
                        f"was logged (its process stopped, the store went away under it "
                        f"or the run was stopped at once); the resumed run decides the "
                        f"point again in a new cycle and applies nothing of this one "
                        f"({len(notes)} memorised note(s) withdrawn)",
                    },
                )
            )


def run_backtest(
    config: EpisodeConfig,
    store: Store,
    *,
    progress: bool = True,
    services: Optional[CycleServices] = None,
    out_dir: str | Path = DEFAULT_EXPERIMENTS,
    run_id: Optional[str] = None,
    max_steps: Optional[int] = None,
    on_step: Optional[Callable[[DecisionPointLog], None]] = None,
    budget: Optional[Spending] = None,
) -> EpisodeResult:
    """Run (or resume) an episode; returns its result. `max_steps` stops after that many new decision
    points (the run stays resumable); `on_step` is called after each logged decision point; `budget`
    replaces the run's own (a sweep's, shared with its other episodes). A cycle the store went away under
    raises CycleNotAudited: its point is not logged and the run resumes at it."""
    run_id = run_id or config.episode_id
    run_dir = Path(out_dir) / run_id
    sim = SimulationExecution.for_market(
        config.market, fees_bps=config.fees_bps, slippage_bps=config.slippage_bps, decide_at=config.decide_at
    )
    rt = episode_services(config, services, sim, budget)
    validate_config(config, rt.market)
    dates = decision_dates(
        rt.market, config.tickers, config.start, config.end, config.every, config.market, config.decide_at
    )

    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path, log_path, th_path = run_dir / "config.json", run_dir / "episode_log.jsonl", run_dir / "trade_history.json"
    if run_file_exists(cfg_path):
        stored = EpisodeConfig.model_validate_json(read_run_text(cfg_path))
        if stored != config:
            raise BacktestError(f"run id '{run_id}' already exists with a different config ({cfg_path})")
    else:
        _write_atomic(cfg_path, config_json(config))

    logs = load_logs(log_path)
    if len(logs) > len(dates) or any(lg.date != dates[lg.decision_point_idx] for lg in logs):
        raise BacktestError(f"{log_path} does not match this config's decision dates")
    portfolio = logs[-1].portfolio_after if logs else PortfolioSnapshot(cash=config.initial_cash)
    trades: list[ExecutedTrade] = logged_trades(logs)
    session_id = session_id_of(run_id)
    if rt.budget is not None and logs:  # a resumed run's budget counts what its earlier points spent
        before = Spend.merge(lg.agent_output.get("llm_cost") for lg in logs)
        rt.budget.spent(before["total_tokens"], before["usd"], before["calls"])

    if pending_files(store.spool_dir):
        store.recover_spool()  # a cut-off cycle's spooled events first: its superseding follows all of it
    _supersede_cut_off(store, session_id, logs)
    bar = _Progress(len(dates), len(logs), progress and sys.stderr.isatty())
    steps = 0
    try:
        with open_run_file(log_path, "a", encoding="utf-8") as log_file:
            for idx in range(len(logs), len(dates)):
                if max_steps is not None and steps >= max_steps:
                    break
                date = dates[idx]
                prev = dates[idx - 1] if idx else None
                case = build_case(config, rt.market, date, idx, portfolio, prev)
                # the cycle reads its starting portfolio from the store: hand it the simulation's
                store.portfolios.save(session_id, portfolio, f"{session_id}:pre{idx}")
                sim.portfolio = portfolio
                outcome = run_state_machine(
                    list(case.tickers), date, store=store, session_id=session_id, services=rt, case=case.for_agent()
                )
                fault = store_fault(outcome)
                if fault:
                    raise CycleNotAudited(
                        f"decision point {idx} ({date}) not logged: cycle {outcome.cycle_id} "
                        f"{fault}; the run stops here and decides this point again when "
                        f"resumed with run id {run_id} once the store is back"
                    )
                # SCANNING may have closed positions on their levels first: the decision starts from that book
                _, exit_trades = sim.exits.get(outcome.cycle_id, ([], []))
                action, decision, result, after, output = extract(outcome, sim, sim.portfolio)
                # marked after the point's trades at the prices they filled at (StockBench's NAV at the open)
                prices = point_prices(config, rt.market, case, date)
                equity, _ = mark_to_market(after, prices)
                entry = DecisionPointLog(
                    case_id=case.case_id,
                    decision_point_idx=idx,
                    date=date,
                    action=action,
                    agent_output=output,
                    extracted_decision=decision,
                    execution_result=result,
                    exits=exit_trades,
                    dividends=sim.dividends.get(outcome.cycle_id, []),
                    portfolio_before=portfolio,
                    portfolio_after=after,
                    prices=prices,
                    equity=round(equity, 6),
                    steps_remaining=len(dates) - idx - 1,
                )
                log_file.write(entry.model_dump_json() + "\n")
                log_file.flush()
                portfolio = after
                trades.extend(exit_trades + result.executed_trades)
                logs.append(entry)
                _write_atomic(th_path, trade_history_json(trades))
                steps += 1
                bar.update(date, equity, len(trades))
                if on_step is not None:
                    on_step(entry)
    finally:
        bar.close()
    if not run_file_exists(th_path):
        _write_atomic(th_path, trade_history_json(trades))
    episode = episode_result(config, logs, trades, portfolio)
    if len(logs) == len(dates):
        _write_atomic(run_dir / "result.json", episode.model_dump_json(indent=2) + "\n")
    return episode


def store_fault(outcome) -> Optional[str]:
    """Why a cycle is no decision of its point because of the store (None when it is one): its audit spooled,
    or it failed on the store."""
    if outcome.audit_error:
        return f"could not be audited ({outcome.audit_error})"
    error = outcome.error or {}
    if error.get("type") in STORE_FAULTS:
        return (
            f"failed on the store in {error.get('state')} ({error['type']}: "
            f"{str(error.get('message') or '').splitlines()[0][:200] if error.get('message') else ''})"
        )
    return None


def logged_trades(logs: list[DecisionPointLog]) -> list[ExecutedTrade]:
    """Every fill the log holds, in order: each point's exits, then its decision's trades."""
    return [t for lg in logs for t in lg.exits + lg.execution_result.executed_trades]


def logged_result(config: EpisodeConfig, run_dir: Path) -> Optional[EpisodeResult]:
    """The figures of what a run has logged so far (a stopped or failed run's); None with nothing logged."""
    logs = load_logs(run_dir / "episode_log.jsonl")
    return episode_result(config, logs, logged_trades(logs), logs[-1].portfolio_after) if logs else None


def episode_result(
    config: EpisodeConfig, logs: list[DecisionPointLog], trades: list[ExecutedTrade], portfolio: PortfolioSnapshot
) -> EpisodeResult:
    curve = []
    for lg in logs:
        eq, expo = mark_to_market(lg.portfolio_after, lg.prices)
        curve.append(EquityPoint(date=lg.date, equity=round(eq, 6), cash=lg.portfolio_after.cash, exposure=expo))
    ppy = TRADING_DAYS / config.every
    dates = [p.date for p in curve]
    metrics, bench, bench_curve = {}, {}, []
    if curve:
        metrics = summarize(
            dates,
            [p.equity for p in curve],
            trades=trades,
            exposure=[p.exposure for p in curve],
            rf=config.risk_free_rate,
            periods_per_year=ppy,
        )
        closes = {t: [lg.prices[t] for lg in logs] for t in config.tickers}
        bh = buy_and_hold_curve(closes, config.initial_cash)
        bench_curve = [EquityPoint(date=d, equity=round(v, 6), cash=0.0, exposure=1.0) for d, v in zip(dates, bh)]
        bench = summarize(
            dates, bh, trades=[], exposure=[1.0] * len(bh), rf=config.risk_free_rate, periods_per_year=ppy
        )
        bench["num_trades"] = len(config.tickers)
    exits: dict[str, int] = {}
    for t in trades:
        if t.reason:
            exits[t.reason] = exits.get(t.reason, 0) + 1
    actions: dict[str, int] = {}
    statuses: dict[str, int] = {}
    failed = []
    for lg in logs:
        actions[lg.action] = actions.get(lg.action, 0) + 1
        status = str(lg.agent_output.get("cycle_status") or "unknown")
        statuses[status] = statuses.get(status, 0) + 1
        if lg.action == "failed":
            failed.append(
                {
                    "idx": lg.decision_point_idx,
                    "date": lg.date,
                    "status": status,
                    "error": (lg.agent_output.get("error") or {}).get("message", lg.execution_result.message),
                }
            )
    warnings = []
    if logs and len(logs) < SHORT_WINDOW_POINTS:
        warnings.append(
            f"short window: {len(logs)} decision point(s) ({dates[0]}..{dates[-1]}); annualised "
            f"figures (return, volatility, Sharpe, Sortino, Calmar) extrapolate it to a year and are "
            f"not meaningful below {SHORT_WINDOW_POINTS}"
        )
    if failed:
        warnings.append(
            f"{len(failed)} of {len(logs)} cycle(s) failed: their decision points made no decision "
            f"(first: {failed[0]['date']}: {failed[0]['error']})"
        )
    benchmark = {
        "kind": "buy_and_hold",
        "tickers": list(config.tickers),
        "weights": {t: round(1 / len(config.tickers), 6) for t in config.tickers},
        "initial_cash": config.initial_cash,
        "bought_at": f"the first decision point's {config.decide_at}, fractional shares",
        "fees_bps": 0.0,
        "slippage_bps": 0.0,
        "rebalanced": False,
    }
    return EpisodeResult(
        episode_id=config.episode_id,
        decision_points=len(logs),
        trade_history=TradeHistory(trades=trades),
        final_portfolio=portfolio,
        equity_curve=curve,
        benchmark_curve=bench_curve,
        metrics=metrics,
        benchmark_metrics=bench,
        benchmark=benchmark,
        actions=actions,
        cycle_statuses=statuses,
        failed_points=failed,
        warnings=warnings,
        exits=exits,
        llm_cost=Spend.merge(lg.agent_output.get("llm_cost") for lg in logs),
    )
