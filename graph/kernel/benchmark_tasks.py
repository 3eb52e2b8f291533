"""A benchmark as a kernel task (kind `benchmark`): planned and refused in the caller, before a task exists; run in a
thread of the serving process like a backtest or a sweep, with the same task document, cancel and resume. Its
progress counts decision points over every run; its folder is experiments/<benchmark id>/, where the scorecard is
written once every run has logged every point. Also the estimate and the look-ahead audit a benchmark's sessions get.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from graph.kernel.errors import BadInput, Conflict, NotFound
from graph.kernel.models import BenchmarkInput, LookaheadTarget, inside
from graph.kernel.tasks import TaskCancelled, TaskKind, new_task_id, register
from graph.services.run_files import read_run_text, run_file_exists

FILES = (
    ("benchmark.json", "application/json"),
    ("scorecard.json", "application/json"),
    ("scorecard.csv", "text/csv"),
    ("scorecard.png", "image/png"),
)


def protocol_of(inp: BenchmarkInput):
    from graph.machine.runner import InputError, parse_symbols
    from graph.services.benchmark.stockbench.protocol import SYMBOLS, Protocol

    try:
        symbols = tuple(parse_symbols(inp.symbols)) if inp.symbols else SYMBOLS
    except InputError as e:
        raise BadInput(f"symbols: {e}", field="symbols") from None
    if inp.start > inp.end:
        raise BadInput(f"start {inp.start} is after end {inp.end}", field="start")
    return Protocol(symbols=symbols, start=inp.start, end=inp.end, memory=inp.memory, temperature=inp.temperature)


def models_of(inp: BenchmarkInput) -> list[tuple[Optional[str], Optional[str]]]:
    return [(c.quick, c.deep) for c in inp.models]


def _graph_errors(fn, *args, **kwargs):
    """The benchmark driver's refusals as kernel errors: bad input names its field, a changed benchmark conflicts."""
    from graph.services.benchmark.stockbench.run import BenchmarkChanged, BenchmarkError

    try:
        return fn(*args, **kwargs)
    except BenchmarkError as e:
        raise BadInput(str(e), field=e.field) from None
    except BenchmarkChanged as e:
        raise Conflict(str(e), field="benchmark_id") from None


def plan_benchmark(manager, inp: BenchmarkInput, benchmark_id: str, task_id: Optional[str] = None):
    from agent.config import AgentConfig
    from graph.services.benchmark.stockbench.run import plan

    inside(manager.experiments, benchmark_id, "benchmark_id")
    uri = home = None
    if inp.workers > 1:
        from graph.kernel.sweep_tasks import store_address

        try:
            import ray  # noqa: F401
        except ImportError:
            raise BadInput(
                "workers > 1 runs the configurations on Ray, which is not installed here: pip install "
                "'tradegraph[sweep]' (or use one worker)",
                field="workers",
            ) from None
        uri, home = store_address(manager.store)
    settings = AgentConfig.from_env()
    limits = {
        "max_tokens": inp.max_tokens or settings.token_budget,
        "max_cost": inp.max_cost or settings.max_cost,
        "max_llm_calls": inp.max_llm_calls or settings.max_llm_calls,
    }
    return _graph_errors(
        plan,
        benchmark_id,
        protocol_of(inp),
        models_of(inp),
        experiments=manager.experiments,
        data=inp.data,
        workers=inp.workers,
        store_uri=uri,
        store_home=home,
        task_id=task_id,
        limits=limits,
        no_cache=inp.no_cache,
        runs=inp.runs,
    )


def start(manager, inp: BenchmarkInput):
    from graph.services.benchmark.stockbench.run import logged_points

    benchmark_id = inp.benchmark_id or f"sb-{uuid.uuid4().hex[:8]}"
    manager.refuse_busy(benchmark_id, "benchmark", "benchmark_id")
    task_id = new_task_id()
    plan = plan_benchmark(manager, inp, benchmark_id, task_id)
    manager.create(
        "benchmark",
        inp,
        benchmark_id,
        plan.dir,
        {"done": sum(logged_points(plan, ep) for ep in plan.episodes), "total": plan.total_points},
        task_id=task_id,
    )
    manager.start_thread(task_id, run_benchmark_task, (manager, task_id, plan))
    return manager.status(task_id)


def resume(manager, doc: dict[str, Any]):
    plan = plan_benchmark(manager, BenchmarkInput.model_validate(doc["params"]), doc["run_id"], doc["_id"])
    return run_benchmark_task, (manager, doc["_id"], plan)


def run_benchmark_task(manager, task_id: str, plan) -> None:
    from graph.services.benchmark.stockbench.run import BenchmarkCancelled, BenchmarkIncomplete, run, score

    plan.ctx.task_id = task_id
    with manager.lifecycle(task_id):
        manager.set(task_id, status="running", started_at=time.time())
        started = time.monotonic()

        def cancel_requested() -> bool:
            return bool((manager.col.find_one({"_id": task_id}, {"cancel_requested": 1}) or {}).get("cancel_requested"))

        try:
            run(
                plan,
                manager.store,
                on_progress=lambda p: manager.set(task_id, progress=p),
                cancel_requested=cancel_requested,
            )
        except BenchmarkCancelled:
            raise TaskCancelled() from None
        except BenchmarkIncomplete as e:
            raise RuntimeError(f"{e}; resume the task (or run the benchmark id again) to finish it") from None
        card, paths = score(plan, manager.store, elapsed_s=round(time.monotonic() - started, 1))
        manager.set(task_id, status="succeeded", finished_at=time.time(), summary=summary_of(card, paths))


def summary_of(card: dict[str, Any], paths: list[Path]) -> dict[str, Any]:
    """What the task document keeps: each run's figures and audit trail, the failures and leaks that make a
    benchmark not clean, and where the files are."""
    runs = [
        {
            k: r.get(k)
            for k in (
                "name",
                "run_id",
                "cumulative_return",
                "max_drawdown",
                "sortino",
                "failed_points",
                "session_ids",
                "llm_calls",
                "usd",
            )
        }
        for r in card["rows"]
        if r["kind"] == "run"
    ]
    failed = sum(int(r["failed_points"] or 0) for r in runs)
    leaks = int((card.get("lookahead") or {}).get("leaks") or 0)
    warnings = []
    if failed:
        warnings.append(f"{failed} decision point(s) failed: their runs are not clean")
    if leaks:
        warnings.append(f"the look-ahead audit found {leaks} leak(s)")
    return {
        "benchmark_id": card.get("benchmark_id"),
        "window": card["window"],
        "runs": runs,
        "failed_points": failed,
        "lookahead_leaks": leaks,
        "clean": not failed and not leaks,
        "elapsed_s": card.get("elapsed_s"),
        "files": [str(p) for p in paths],
        "warnings": warnings,
    }


def artifacts(doc: dict[str, Any], run_dir: Optional[Path]) -> tuple[list[tuple[str, str]], Optional[dict[str, Any]]]:
    metrics = None
    if run_dir is not None and run_file_exists(run_dir / "scorecard.json"):
        metrics = {"scorecard": json.loads(read_run_text(run_dir / "scorecard.json")), "summary": doc.get("summary")}
    return list(FILES), metrics


KIND = register(TaskKind("benchmark", resume=resume, artifacts=artifacts))


# ------------------------------------------------------------------------------------------------ estimate
def estimate(store, inp: BenchmarkInput):
    from graph.services.benchmark.stockbench.estimate import estimate as _estimate

    return _graph_errors(_estimate, protocol_of(inp), models_of(inp), inp.data, store=store, runs=inp.runs)


# ------------------------------------------------------------------------------------------------ look-ahead audit
def lookahead_sessions(store, experiments: Path, target: str) -> tuple[LookaheadTarget, list[str]]:
    """(what the target is, its sessions): a session id, a backtest run id (bt-<id>), or a benchmark or sweep id
    whose folder under experiments/ names its runs."""
    from graph.services.backtest.loop import session_id_of

    if store.events.exists(target):
        return "session", [target]
    if store.events.exists(session_id_of(target)):
        return "run", [session_id_of(target)]
    folder = inside(experiments, target, "target")  # only now a path: a session id need not be a folder name
    folders: tuple[tuple[LookaheadTarget, str], ...] = (("benchmark", "benchmark.json"), ("sweep", "grid.json"))
    for kind, name in folders:
        if run_file_exists(folder / name):
            ids = [session_id_of(e["episode_id"]) for e in json.loads(read_run_text(folder / name))["episodes"]]
            found = [s for s in ids if store.events.exists(s)]
            if not found:
                raise NotFound(
                    f"{kind} '{target}' has no recorded session yet ({', '.join(ids[:3])} …)", field="target"
                )
            return kind, found
    raise NotFound(
        f"'{target}' is no session, backtest run ({session_id_of(target)}), benchmark or sweep "
        f"(no {folder}/benchmark.json)",
        field="target",
    )
