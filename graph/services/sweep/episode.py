"""One episode of a sweep: the body of its Ray task, and callable without Ray.

It runs graph.services.backtest.loop.run_backtest, the same function `tradegraph backtest` runs, with the episode's
configuration, so an episode inside a sweep and the same backtest run alone decide, fill and log the same way.
The run id is the episode id: a retry after a killed worker (Ray re-runs the task) continues after the last
logged decision point, exactly as `tradegraph backtest --run-id` resumes.

Each attempt keeps a document in the store's `sweep_episodes` collection (status, host, pid, points done,
attempts), which is how the sweep's progress view sees what is running and where.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from graph.services.sweep.grid import Episode

COLLECTION = "sweep_episodes"


class EpisodeCancelled(Exception):
    """The sweep was cancelled: the episode stops after its current decision point, resumable."""


@dataclass
class SweepContext:
    """What every episode of one sweep shares; travels to the workers with each task."""

    sweep_id: str
    task_id: Optional[str]
    experiments: str  # absolute: experiments/{sweep_id}/episodes/{episode_id} is the run folder
    store_uri: Optional[str]  # None: the embedded store under store_home
    store_home: Optional[str]
    data: dict[str, str] = field(default_factory=dict)  # prices/news/fundamentals paths (absolute)
    no_cache: bool = False
    limits: Any = None  # a SharedLimits actor handle (or a SharedLimits, without Ray), or None

    @property
    def episodes_dir(self) -> Path:
        return Path(self.experiments) / self.sweep_id / "episodes"


def connect_store(ctx: SweepContext):
    from database.connection import connect

    return connect(ctx.store_uri, home=ctx.store_home)


def episode_config(ep: Episode):
    from schemas.simulation import EpisodeConfig

    return EpisodeConfig(
        episode_id=ep.episode_id,
        tickers=list(ep.symbols),
        initial_cash=ep.capital,
        start=ep.window.start,
        end=ep.window.end,
        every=ep.every,
        fees_bps=ep.fees_bps,
        slippage_bps=ep.slippage_bps,
        market=ep.market,
        memory=ep.memory,
        decide_at=ep.decide_at,
    )


def episode_services(ep: Episode, ctx: SweepContext):
    """The services `tradegraph backtest` would build with the episode's settings in the environment."""
    from agent.config import AgentConfig
    from agent.data.sources import DataFiles
    from graph.machine.cycle_context import default_services

    settings = AgentConfig.from_env(
        memory=ep.memory,
        quick_model=ep.quick_model,
        deep_model=ep.deep_model,
        temperature=ep.temperature,
        input_window=ep.input_window,
    )
    if ep.risk:
        settings = dataclasses.replace(settings, risk=dataclasses.replace(settings.risk, **ep.risk))
    if ctx.no_cache:
        settings = dataclasses.replace(settings, llm_cache=False)
    return default_services(settings, data=DataFiles(**ctx.data) if ctx.data else None)


def provider_of(settings) -> Any:
    from agent.providers import OFFLINE, OFFLINE_MODELS, split_model

    def of(model: str) -> Optional[str]:
        if model in OFFLINE_MODELS:
            return None
        provider = split_model(model)[0] or settings.provider
        return None if provider == OFFLINE else provider

    return of


def run_episode(ep_dict: dict[str, Any], ctx: SweepContext, *, call=None) -> dict[str, Any]:
    """Run or resume one episode; returns its row of results (graph/services/sweep/results.py). An error inside the
    episode is its row's status, not an exception: Ray retries only a worker that died."""
    from graph.services.backtest.loop import logged_result, run_backtest, session_id_of
    from graph.services.sweep.limits import SweepBudget
    from graph.services.sweep.results import episode_row

    ep = Episode.from_dict(ep_dict)
    started = time.time()
    store = connect_store(ctx)
    col = store.db[COLLECTION]
    try:
        doc = col.find_one_and_update(
            {"_id": ep.episode_id},
            {
                "$set": {
                    "sweep_id": ctx.sweep_id,
                    "status": "running",
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started_at": started,
                    "updated_at": started,
                },
                "$inc": {"attempts": 1},
            },
            upsert=True,
            return_document=True,
        )
        attempts = int(doc["attempts"])
        rt = episode_services(ep, ctx)
        budget = None
        if ctx.limits is not None:
            budget = SweepBudget(ctx.limits, ep.episode_id, provider_of(rt.config), call or _ray_get)
        tasks = store.db["tasks"]

        def on_step(entry) -> None:
            col.update_one(
                {"_id": ep.episode_id}, {"$set": {"done": entry.decision_point_idx + 1, "updated_at": time.time()}}
            )
            if ctx.task_id and (tasks.find_one({"_id": ctx.task_id}, {"cancel_requested": 1}) or {}).get(
                "cancel_requested"
            ):
                raise EpisodeCancelled()

        status, error, result = "succeeded", None, None
        try:
            result = run_backtest(
                episode_config(ep),
                store,
                progress=False,
                services=rt,
                out_dir=ctx.episodes_dir,
                run_id=ep.episode_id,
                on_step=on_step,
                budget=budget,
            )
        except EpisodeCancelled:
            status = "cancelled"
        except Exception as e:  # noqa: BLE001 - the row says why; the sweep goes on with the other episodes
            status, error = "failed", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if result is None:  # cancelled or failed: what was logged still counts
            result = logged_result(episode_config(ep), ctx.episodes_dir / ep.episode_id)
        row = episode_row(
            ep,
            result,
            status=status,
            error=error,
            seconds=time.time() - started,
            attempts=attempts,
            session_id=session_id_of(ep.episode_id),
        )
        col.update_one(
            {"_id": ep.episode_id}, {"$set": {"status": status, "updated_at": time.time(), "finished_at": time.time()}}
        )
        return row
    finally:
        store.close()


def _ray_get(ref):
    import ray

    return ray.get(ref)
