"""Sweep scaling: the same 8-episode sweep with 1 and then 2 Ray workers on this machine (offline model, one
embedded store), and the store load it implies at 100 and 1,000 workers.

One Ray instance with 2 CPUs serves both runs, its two worker processes started and warmed (tradegraph imported)
first; that start-up is reported apart, since a long sweep pays it once. Measured per run: episodes and decision
points per second (the driver's clock, first task submitted to last row landed), scaling efficiency =
rate(2) / (2 x rate(1)), and from the store: audit events and BSON bytes per decision point, and the write rate.
The projection multiplies the 1-worker write rate per worker: it assumes the store keeps up, which is exactly what
docs/scaling.md examines.
Run: PYTHONPATH=. python bench/bench_sweep.py [--points 8]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

import bson

from database import connect
from database.embedded import start_server, stop_server
from graph.kernel.core import Kernel
from graph.kernel.models import TaskView

UNIVERSES = [["AAPL", "MSFT"], ["IBM", "GOOG"]]


def sweep(k: Kernel, sweep_id: str, workers: int, points: int) -> dict:
    # 2 universes x 4 windows = 8 episodes of `points` decision points each (every 5 sessions)
    from graph.services.sweep.grid import rolling_windows

    windows = rolling_windows("us_equity", "2011-01-03", "2012-12-31", 5 * points, 5 * points)[:4]
    grid = {
        "sweep_id": sweep_id,
        "universes": UNIVERSES,
        "every": 5,
        "workers": workers,
        "memory": ["session"],
        "windows": {"kind": "list", "spans": [[w.start, w.end] for w in windows]},
    }
    t0 = time.perf_counter()
    task = cast(TaskView, k.call("start_sweep", grid, transport="local"))
    assert k.tasks is not None
    k.tasks.join(task.task_id)
    wall = time.perf_counter() - t0
    view = cast(TaskView, k.call("task_status", {"task_id": task.task_id}, transport="local"))
    assert view.status == "succeeded", view.error
    assert view.run_dir is not None
    rows = [json.loads(x) for x in (Path(view.run_dir) / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8, len(rows)
    return {"wall": wall, "run": view.progress.elapsed_s, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=8, help="decision points per episode")
    ap.add_argument("--repeats", type=int, default=3, help="runs per worker count (medians)")
    args = ap.parse_args()
    import ray

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    started = time.perf_counter() - t0

    @ray.remote(num_cpus=1)
    def warm(_):
        import graph.services.backtest.loop  # noqa: F401 - what an episode imports first

        time.sleep(1.0)  # held, so the two warm-ups land on two processes
        return os.getpid()

    pids = set(ray.get([warm.remote(i) for i in range(2)]))
    warmed = time.perf_counter() - t0 - started
    with tempfile.TemporaryDirectory() as tmp:
        port, _ = start_server(Path(tmp) / "home")
        uri = f"mongodb://127.0.0.1:{port}/bench_sweep"
        try:
            k = Kernel(connect(uri), experiments_dir=Path(tmp) / "exp")
            runs: dict[int, list[dict]] = {1: [], 2: []}
            for rep in range(args.repeats):  # interleaved, so drift in the machine's load hits both alike
                for workers in (1, 2):
                    runs[workers].append(sweep(k, f"w{workers}r{rep}", workers, args.points))
            first = runs[1][0]["rows"]
            docs = list(k.store.db.state_events.find({"session_id": {"$in": [r["session_id"] for r in first]}}))
            points = sum(r["decision_points"] for r in first)
            k.close()
        finally:
            stop_server(Path(tmp) / "home")
            ray.shutdown()
    events_per_point = len(docs) / points
    bytes_per_point = sum(len(bson.encode(d)) for d in docs) / points
    print(
        f"8 episodes x {args.points} decision points, 2 universes x 4 windows, offline model, one embedded store, "
        f"{args.repeats} runs per worker count"
    )
    print(
        f"Ray: local instance started in {started:.1f} s, {len(pids)} worker processes warmed in {warmed:.1f} s "
        f"(paid once per sweep, not counted below)"
    )
    print(f"audit per decision point: {events_per_point:.0f} events, {bytes_per_point / 1024:.0f} KB (BSON)")
    rate = {w: statistics.median(8 / g["run"] for g in gs) for w, gs in runs.items()}
    print(f"{'workers':>8} {'runs s':>20} {'episodes/s':>11} {'points/s':>9} {'events/s':>9} {'KB/s':>7}  (medians)")
    for w, gs in runs.items():
        pts = rate[w] * points / 8
        each = ", ".join(f"{g['run']:.1f}" for g in gs)
        print(
            f"{w:>8} {each:>20} {rate[w]:>11.3f} "
            f"{pts:>9.2f} {pts * events_per_point:>9.0f} {pts * bytes_per_point / 1024:>7.0f}"
        )
        took = statistics.median(r["seconds"] for g in gs for r in g["rows"])
        print(f"{'':>8} median episode {took:.2f} s on a worker")
    eff = rate[2] / (2 * rate[1])
    print(
        f"scaling 1 -> 2 workers: x{rate[2] / rate[1]:.2f} = {eff * 100:.0f}% efficiency (2 cores: the embedded "
        f"store's server, Ray's own processes and the driver share them with the workers)"
    )
    per_worker = rate[1] * points / 8
    for n in (100, 1000):
        ev = per_worker * events_per_point * n
        print(
            f"projected at {n:>5} workers (offline pace, {per_worker:.2f} points/s each): {ev:,.0f} events/s, "
            f"{ev * bytes_per_point / events_per_point / 1e6:,.1f} MB/s into state_events"
        )
    print(
        f"RESULT episodes_per_s_1={rate[1]:.3f} episodes_per_s_2={rate[2]:.3f} efficiency={eff:.2f} "
        f"events_per_point={events_per_point:.0f} kb_per_point={bytes_per_point / 1024:.0f} "
        f"points_per_s_worker={per_worker:.2f}"
    )


if __name__ == "__main__":
    main()
