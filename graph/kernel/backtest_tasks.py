"""A backtest as a kernel task (kind `backtest`): refused in the caller before a task exists, run in a thread of the
serving process by run_backtest, whose on_step reports progress and reads the cancel flag after every decision point;
resuming runs it again with the same run id, which continues after the last logged point."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from graph.kernel.errors import BadInput, Conflict
from graph.kernel.inputs import data_files, with_spending
from graph.kernel.models import BacktestInput
from graph.kernel.tasks import TaskCancelled, TaskKind, register
from graph.services.run_files import read_run_text, run_file_exists

FILES = (
    ("config.json", "application/json"),
    ("episode_log.jsonl", "application/jsonl"),
    ("trade_history.json", "application/json"),
    ("result.json", "application/json"),
    ("equity.png", "image/png"),
)


def start(manager, inp: BacktestInput):
    config, run_id, total, data = prepare(manager, inp)
    manager.refuse_busy(run_id, "run", "run_id")
    task_id = manager.create("backtest", inp, run_id, manager.experiments / run_id, {"done": 0, "total": total})
    manager.start_thread(task_id, run, (manager, task_id, config, run_id, data, inp))
    return manager.status(task_id)


def resume(manager, doc: dict[str, Any]):
    inp = BacktestInput.model_validate(doc["params"])
    config, run_id, _, data = prepare(manager, inp, run_id=doc["run_id"])
    return run, (manager, doc["_id"], config, run_id, data, inp)


def artifacts(doc: dict[str, Any], run_dir: Optional[Path]):
    metrics = None
    if run_dir is not None and run_file_exists(run_dir / "result.json"):
        res = json.loads(read_run_text(run_dir / "result.json"))
        metrics = {
            k: res.get(k)
            for k in (
                "metrics",
                "benchmark_metrics",
                "actions",
                "cycle_statuses",
                "exits",
                "warnings",
                "decision_points",
            )
        }
    return list(FILES), metrics


def prepare(manager, inp: BacktestInput, run_id: Optional[str] = None):
    """Everything that can be refused is refused here, before a task exists."""
    from graph.machine.runner import parse_symbols
    from graph.services.backtest.loop import decision_dates, validate_config
    from schemas.simulation import EpisodeConfig

    run_id = run_id or inp.run_id or f"bt-{uuid.uuid4().hex[:8]}"
    config = EpisodeConfig(
        episode_id=run_id,
        tickers=parse_symbols(inp.symbols),
        initial_cash=inp.capital,
        start=inp.start,
        end=inp.end,
        every=inp.every,
        fees_bps=inp.fees_bps,
        slippage_bps=inp.slippage_bps,
        market=inp.market,
        memory=inp.memory,
    )
    data = data_of(manager, inp, run_id)
    market = manager.runtime_factory(None, data).market
    for t in config.tickers:  # an unknown symbol names the prices file searched
        market._check(t)
    validate_config(config, market)
    cfg_path = manager.experiments / run_id / "config.json"
    if run_file_exists(cfg_path) and EpisodeConfig.model_validate_json(read_run_text(cfg_path)) != config:
        raise Conflict(f"run id '{run_id}' already exists with a different config ({cfg_path})", field="run_id")
    total = len(decision_dates(market, config.tickers, config.start, config.end, config.every, config.market))
    if total == 0:
        raise BadInput(f"no decision point in {inp.start}..{inp.end}", field="start")
    return config, run_id, total, data


def data_of(manager, inp: BacktestInput, run_id: str):
    """The files given, else those the run read before it stopped; a resumed run refuses other files than it
    started on (by path: a file appended to since is read as it is now)."""
    from agent.data.sources import DataFiles, resolved
    from graph.machine.session_files import session_files
    from graph.services.backtest.loop import session_id_of

    session = session_id_of(run_id)
    given = DataFiles(prices=inp.prices, news=inp.news, fundamentals=inp.fundamentals).given()
    before = session_files(manager.store, session, DataFiles()).given() if given else {}
    for kind, path in given.items():
        if kind in before and resolved(path) != resolved(before[kind]):
            raise Conflict(
                f"run '{run_id}' was run on {kind} {before[kind]}, not {path}: resume it without "
                f"--{kind} (or with the same file), or start a new run id",
                field=kind,
            )
    return data_files(inp, manager.store, session)


def run(manager, task_id: str, config, run_id: str, data, inp: BacktestInput) -> None:
    from graph.services.backtest.loop import run_backtest

    with manager.lifecycle(task_id):
        doc = manager.set(task_id, status="running", started_at=time.time())
        if doc and doc.get("cancel_requested"):
            raise TaskCancelled()
        progress = dict((doc or {}).get("progress") or {})
        total, trades = int(progress.get("total", 0)), int(progress.get("trades", 0))
        started, first_done = time.monotonic(), [None]

        def on_step(entry) -> None:
            nonlocal trades
            done = entry.decision_point_idx + 1
            if first_done[0] is None:
                first_done[0] = done - 1  # a resumed run starts past zero: rate from this process's points
            rate = (time.monotonic() - started) / max(1, done - first_done[0])
            trades += len(entry.exits) + len(entry.execution_result.executed_trades)
            after = manager.set(
                task_id,
                progress={
                    "done": done,
                    "total": total,
                    "date": entry.date,
                    "equity": entry.equity,
                    "trades": trades,
                    "eta_s": round(rate * (total - done), 1),
                },
            )
            if after and after.get("cancel_requested"):
                raise TaskCancelled()

        services = with_spending(manager.runtime_factory(config.memory, data), inp)  # the cache switch, the budgets
        result = run_backtest(
            config,
            manager.store,
            progress=False,
            services=services,
            out_dir=manager.experiments,
            run_id=run_id,
            on_step=on_step,
        )
        plot = None
        if result.equity_curve:
            from graph.services.backtest.plot import plot_result

            plot = str(plot_result(result, manager.experiments / run_id / "equity.png"))
        summary = {
            "decision_points": result.decision_points,
            "actions": result.actions,
            "total_return": result.metrics.get("total_return"),
            "warnings": result.warnings,
            "plot": plot,
        }
        manager.set(
            task_id,
            status="succeeded",
            finished_at=time.time(),
            summary=summary,
            progress={
                "done": result.decision_points,
                "total": total,
                "trades": trades,
                "eta_s": 0.0,
                "equity": result.equity_curve[-1].equity if result.equity_curve else None,
                "date": result.equity_curve[-1].date if result.equity_curve else None,
            },
        )


KIND = register(TaskKind("backtest", resume=resume, artifacts=artifacts))
