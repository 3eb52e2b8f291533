"""The sweep's driver: starts or joins Ray, runs each unfinished episode as a Ray task, keeps at most `workers`
in flight, records each row as it lands, and writes the aggregate and the plot at the end.

Faults:
- a worker that dies mid-episode is retried by Ray (`max_retries`); the retry resumes the episode after its last
  logged point (graph/services/backtest/loop.py), and the audit marks the cut-off cycle superseded;
- a driver that dies leaves results.jsonl with every finished row; running the sweep again by its id skips
  episodes whose row succeeded and resumes the others where their logs end;
- a cancel is read by each episode after its current decision point; episodes not started yet never start.

Ray is imported here only, so nothing else of tradegraph needs it installed.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from graph.services.sweep.episode import SweepContext, run_episode
from graph.services.sweep.grid import Episode
from graph.services.sweep.limits import SharedLimits
from graph.services.sweep.results import append_row, load_rows, plot, write_aggregate, write_rows

# what a worker on another node must see of this process's environment (a local instance inherits it all)
FORWARDED_ENV = ("MONGODB_URI",)
FORWARDED_PREFIX = "TRADEGRAPH_"


class SweepError(ValueError):
    """A sweep that can't run as asked (a multi-node cluster on the embedded store, Ray missing)."""


@dataclass
class SweepPlan:
    episodes: list[Episode]
    ctx: SweepContext
    workers: int
    ray_address: Optional[str] = None
    max_retries: int = 3
    limits: dict[str, Any] = field(default_factory=dict)  # SharedLimits' keyword arguments, None = no limit
    warnings: list[str] = field(default_factory=list)

    @property
    def sweep_dir(self) -> Path:
        return Path(self.ctx.experiments) / self.ctx.sweep_id


def _ray():
    try:
        import ray
    except ImportError:
        raise SweepError("sweeps run on Ray, which is not installed: pip install 'tradegraph[sweep]'") from None
    return ray


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIX) or k in FORWARDED_ENV}


# how every instance is joined or started: no dashboard, workers' output kept out of the driver's, Ray's own
# logging at ERROR
_RAY_OPTIONS: dict[str, Any] = dict(
    include_dashboard=False,
    log_to_driver=False,
    configure_logging=True,
    logging_level="ERROR",
)


def start_ray(plan: SweepPlan) -> bool:
    """Join --ray-address, or start a local instance with `workers` CPUs; True if this call started it."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if plan.ray_address:
        ray.init(address=plan.ray_address, runtime_env={"env_vars": _env()}, **_RAY_OPTIONS)
    else:
        start_local_ray(plan.workers)
    return True


def start_local_ray(workers: int) -> None:
    """A new local Ray instance of this process's own with `workers` CPUs, which a sweep run here then joins."""
    # no runtime_env: a local instance's workers inherit this process's environment, and a job-level one would leave
    # the workers Ray starts with the instance unused (they lack it) and start as many again, ~1.5 s of CPU per
    # instance (measured: 2 workers)
    # "local": a new instance of our own, even when a `ray start` cluster runs on this machine (ray.init() would
    # join that one, and refuse num_cpus there)
    _ray().init(address="local", num_cpus=workers, **_RAY_OPTIONS)


def check_cluster(plan: SweepPlan, nodes: list[dict[str, Any]]) -> None:
    """The embedded store listens on this machine's loopback only: a worker on another node can't reach it."""
    alive = [n for n in nodes if n.get("Alive")]
    if len(alive) > 1 and plan.ctx.store_uri is None:
        raise SweepError(
            f"this Ray cluster has {len(alive)} nodes, and the embedded store is reachable from this "
            f"machine only: set MONGODB_URI to a MongoDB every node can reach"
        )
    if len(alive) > 1 and plan.ctx.store_uri is not None and plan.ctx.store_uri.startswith("mongomock://"):
        raise SweepError("a mongomock:// store lives in one process: a sweep needs MONGODB_URI or the embedded store")


def run_sweep(
    plan: SweepPlan, *, on_progress: Callable[[dict[str, Any]], None], cancel_requested: Callable[[], bool]
) -> dict[str, Any]:
    """Run every unfinished episode; returns the summary (episodes by status, failed cycles, files)."""
    sweep_dir = plan.sweep_dir
    rows = load_rows(sweep_dir)
    pending = [e for e in plan.episodes if (rows.get(e.episode_id) or {}).get("status") != "succeeded"]
    if not pending:  # a finished sweep resumed or repeated: its rows are the answer, with no Ray instance started
        return _finished(plan, rows, on_progress)
    ray = _ray()
    started = start_ray(plan)
    try:
        check_cluster(plan, ray.nodes())
        ctx = plan.ctx
        if any(v for v in plan.limits.values()):
            actor = ray.remote(num_cpus=0)(SharedLimits).remote(**plan.limits)
            for row in rows.values():  # what finished episodes already spent counts against the sweep's budget
                ray.get(actor.spent.remote(*_spending(row)))
            ctx = dataclasses.replace(ctx, limits=actor)
        actor = ctx.limits
        task = ray.remote(num_cpus=1, max_retries=plan.max_retries, retry_exceptions=False)(run_episode)
        queue, cancelling = list(pending), False
        in_flight: dict[Any, tuple[Episode, float]] = {}  # Ray's object ref -> (its episode, when it was sent)
        took: list[float] = []
        t0 = time.monotonic()

        def progress() -> None:
            on_progress(_progress(plan, rows, len(queue), len(in_flight), took, time.monotonic() - t0))

        progress()
        while queue or in_flight:
            while queue and len(in_flight) < plan.workers:
                ep = queue.pop(0)
                in_flight[task.remote(ep.as_dict(), ctx)] = (ep, time.monotonic())
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                ep, since = in_flight.pop(ref)
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as e:  # retries used up: the episode failed, the sweep goes on
                    row = {
                        **(rows.get(ep.episode_id) or _empty_row(ep)),
                        "status": "failed",
                        "error": f"{type(e).__name__}: worker died {plan.max_retries + 1} time(s)",
                    }
                rows[ep.episode_id] = row
                if row["status"] == "succeeded":
                    took.append(time.monotonic() - since)
                append_row(sweep_dir, row)
            if not cancelling and cancel_requested():
                cancelling = True
                queue.clear()  # running episodes stop after their current point, reading the same flag
            progress()
        limits = ray.get(actor.state.remote()) if actor is not None else None
    finally:
        if started:
            ray.shutdown()
    return {**finish(plan, rows, cancelled=cancelling), "limits": limits}


def _progress(
    plan: SweepPlan, rows: dict[str, dict[str, Any]], queued: int, running: int, took: list[float], elapsed_s: float
) -> dict[str, Any]:
    """The sweep's progress: episodes by status, and an estimate of the rest from the median finished episode."""
    left = queued + running
    per = statistics.median(took) if took else None
    return {
        "done": sum(1 for r in rows.values() if r["status"] == "succeeded"),
        "total": len(plan.episodes),
        "running": running,
        "failed": sum(1 for r in rows.values() if r["status"] == "failed"),
        "unit": "episodes",
        "elapsed_s": round(elapsed_s, 1),
        "eta_s": round(per * left / max(1, min(plan.workers, left)), 1)
        if per and left
        else (0.0 if not left else None),
    }


def _finished(
    plan: SweepPlan, rows: dict[str, dict[str, Any]], on_progress: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    on_progress(_progress(plan, rows, 0, 0, [], 0.0))
    limits = None
    if any(v for v in plan.limits.values()):  # what the finished episodes spent, as the live actor would report it
        shared = SharedLimits(**plan.limits)
        for row in rows.values():
            shared.spent(*_spending(row))
        limits = shared.state()
    return {**finish(plan, rows, cancelled=False), "limits": limits}


def _spending(row: dict[str, Any]) -> tuple[str, int, float, int]:
    """A row's logged spending, as SharedLimits.spent takes it."""
    return (
        row["episode_id"],
        int(row.get("llm_tokens") or 0),
        float(row.get("llm_usd") or 0.0),
        int(row.get("llm_calls") or 0),
    )


def _empty_row(ep: Episode) -> dict[str, Any]:
    from graph.services.backtest.loop import session_id_of
    from graph.services.sweep.results import episode_row

    return episode_row(
        ep, None, status="failed", error=None, seconds=0.0, attempts=0, session_id=session_id_of(ep.episode_id)
    )


def finish(plan: SweepPlan, rows: dict[str, dict[str, Any]], *, cancelled: bool) -> dict[str, Any]:
    write_rows(plan.sweep_dir, rows, [e.episode_id for e in plan.episodes])
    ordered = [rows[e.episode_id] for e in plan.episodes if e.episode_id in rows]
    agg = write_aggregate(plan.sweep_dir, ordered)
    figure = plot(plan.sweep_dir, ordered)
    by_status: dict[str, int] = {}
    for r in ordered:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    return {
        "episodes": len(plan.episodes),
        "by_status": by_status,
        "cancelled": cancelled,
        "failed_cycles": sum(int(r["failed_cycles"] or 0) for r in ordered),
        "configurations": len(agg),
        "not_run": len(plan.episodes) - len(ordered),
        "plot": str(figure) if figure else None,
        "failed": [{"episode_id": r["episode_id"], "error": r["error"]} for r in ordered if r["status"] == "failed"][
            :10
        ],
        "warnings": list(plan.warnings),
    }
