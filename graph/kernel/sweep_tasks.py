"""A sweep as a kernel task (kind `sweep`): planned and refused in the caller, before a task exists; driven in a
thread of the serving process like a backtest, with the same task document, cancel and resume.

The task's run id is the sweep id and its folder experiments/{sweep_id}/. Its progress counts episodes: done
(succeeded), running, failed, and an ETA from the median episode so far.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from graph.kernel.errors import BadInput
from graph.kernel.models import SweepInput
from graph.kernel.tasks import TaskKind, new_task_id, register
from graph.services.run_files import read_run_text, run_file_exists


def store_address(store) -> tuple[Optional[str], Optional[str]]:
    """(uri, embedded home) a worker process connects with; a mongomock store can't be shared."""
    if store.uri.startswith("mongomock://"):
        raise BadInput(
            "a sweep's workers are other processes, and a mongomock:// store lives in this one: use the "
            "embedded store (no MONGODB_URI) or a MongoDB",
            field="store",
        )
    if store.target.startswith("embedded:"):
        return None, store.target[len("embedded:") :].rsplit("#", 1)[0]
    return store.uri, None


def plan_sweep(manager, inp: SweepInput, sweep_id: Optional[str] = None, task_id: Optional[str] = None):
    """Everything refusable is refused here: Ray missing, a bad grid, an unknown symbol or a window outside the
    data in any episode, a provider that isn't ready, a changed grid under an existing sweep id."""
    from agent.config import AgentConfig, ConfigError
    from agent.data.sources import DataFiles, resolved
    from graph.services.backtest.loop import validate_config
    from graph.services.sweep.driver import SweepPlan
    from graph.services.sweep.episode import SweepContext, episode_config
    from graph.services.sweep.grid import expand, grid_hash
    from graph.services.sweep.results import write_grid

    try:
        import ray  # noqa: F401
    except ImportError:
        raise BadInput(
            "sweeps run on Ray, which is not installed here: pip install 'tradegraph[sweep]'", field="workers"
        ) from None
    sweep_id = sweep_id or inp.sweep_id or f"sw-{uuid.uuid4().hex[:8]}"
    episodes = expand(inp, sweep_id)
    data = {
        k: str(resolved(v))
        for k, v in (("prices", inp.prices), ("news", inp.news), ("fundamentals", inp.fundamentals))
        if v
    }
    market = manager.runtime_factory(None, DataFiles(**data) if data else None).market
    checked = set()
    for ep in episodes:
        key = (ep.symbols, ep.window, ep.market, ep.every, ep.decide_at)
        if key not in checked:
            checked.add(key)
            try:
                validate_config(episode_config(ep), market)
            except ValueError as e:
                raise BadInput(
                    f"episode {ep.episode_id} ({ep.config_key}, {ep.window.label}): {e}", field="windows"
                ) from None
    settings = AgentConfig.from_env()
    for quick, deep in {(ep.quick_model, ep.deep_model) for ep in episodes if ep.quick_model}:
        try:
            AgentConfig.from_env(quick_model=quick, deep_model=deep)
        except ConfigError as e:  # a provider not ready (package, key, endpoint) for a model of the grid
            raise BadInput(f"model {quick}: {e}", field="models") from None
    sweep_dir = manager.experiments / sweep_id
    uri, home = store_address(manager.store)  # before anything is written
    write_grid(sweep_dir, inp.model_dump(mode="json"), episodes, grid_hash(episodes))  # Conflict on another grid
    ctx = SweepContext(
        sweep_id=sweep_id,
        task_id=task_id,
        experiments=str(manager.experiments),
        store_uri=uri,
        store_home=home,
        data=data,
        no_cache=inp.no_cache,
    )
    limits = {
        "max_tokens": inp.max_tokens or settings.token_budget,
        "max_cost": inp.max_cost or settings.max_cost,
        "max_llm_calls": inp.max_llm_calls or settings.max_llm_calls,
        "requests_per_minute": inp.requests_per_minute,
        "tokens_per_minute": inp.tokens_per_minute,
    }
    warnings = []
    if "on" in inp.memory:
        # memory on recalls every session's notes known before the date: episodes running at once then see
        # each other's notes as the schedule happens to order them
        warnings.append(
            "memory 'on' lets an episode recall notes other episodes of this sweep wrote, in whatever "
            "order they ran: its results depend on the schedule; 'session' keeps episodes independent"
        )
    return SweepPlan(
        episodes=episodes,
        ctx=ctx,
        workers=inp.workers,
        ray_address=inp.ray_address,
        max_retries=inp.max_retries,
        limits=limits,
        warnings=warnings,
    )


def run_sweep_task(manager, task_id: str, plan) -> None:
    from graph.services.sweep.driver import run_sweep

    plan.ctx.task_id = task_id
    with manager.lifecycle(task_id):
        manager.set(task_id, status="running", started_at=time.time())
        summary = run_sweep(
            plan,
            on_progress=lambda p: manager.set(task_id, progress=p),
            cancel_requested=lambda: bool(
                (manager.col.find_one({"_id": task_id}, {"cancel_requested": 1}) or {}).get("cancel_requested")
            ),
        )
        manager.set(
            task_id,
            status="cancelled" if summary["cancelled"] else "succeeded",
            finished_at=time.time(),
            summary=summary,
        )


def start(manager, inp: SweepInput):
    sweep_id = inp.sweep_id or f"sw-{uuid.uuid4().hex[:8]}"
    manager.refuse_busy(sweep_id, "sweep", "sweep_id")
    task_id = new_task_id()
    plan = plan_sweep(manager, inp, sweep_id, task_id)
    manager.create(
        "sweep",
        inp,
        sweep_id,
        Path(manager.experiments) / sweep_id,
        {"done": 0, "total": len(plan.episodes), "unit": "episodes"},
        task_id=task_id,
    )
    manager.start_thread(task_id, run_sweep_task, (manager, task_id, plan))
    return manager.status(task_id)


def resume(manager, doc: dict[str, Any]):
    plan = plan_sweep(manager, SweepInput.model_validate(doc["params"]), sweep_id=doc["run_id"], task_id=doc["_id"])
    return run_sweep_task, (manager, doc["_id"], plan)


def artifacts(doc: dict[str, Any], run_dir: Optional[Path]):
    from graph.services.sweep.results import SWEEP_FILES

    metrics = None
    if run_dir is not None and run_file_exists(run_dir / "aggregate.json"):
        metrics = {"aggregate": json.loads(read_run_text(run_dir / "aggregate.json")), "summary": doc.get("summary")}
    return list(SWEEP_FILES), metrics


KIND = register(TaskKind("sweep", resume=resume, artifacts=artifacts))
