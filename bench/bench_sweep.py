"""Sweep scaling: the same 8-episode sweep with 1 and then 2 Ray workers on this machine (offline model, one
embedded store), and the store load it implies at 100 and 1,000 workers.

Measured: episodes and decision points per second (the driver's clock, from the first task submitted to the last
row landed: Ray's own start-up, ~5-8 s here, is reported apart), scaling efficiency = rate(2) / (2 x rate(1)),
and from the store: audit events and BSON bytes per decision point, and the write rate while N episodes run.
The projection multiplies the 1-worker write rate per worker: it assumes the store keeps up, which is exactly
what docs/scaling.md examines.
Run: PYTHONPATH=. python bench/bench_sweep.py [--points 4]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import bson

from database import connect
from database.embedded import start_server, stop_server
from graph.kernel.core import Kernel

UNIVERSES = [["AAPL", "MSFT"], ["IBM", "GOOG"]]


def sweep(k: Kernel, sweep_id: str, workers: int, points: int) -> dict:
    # 2 universes x 4 windows = 8 episodes of `points` decision points each (every 5 sessions)
    length = 5 * points
    grid = {"sweep_id": sweep_id, "universes": UNIVERSES, "every": 5, "workers": workers, "memory": ["session"],
            "windows": {"kind": "rolling", "start": "2011-01-03", "end": "2011-12-30", "length": length,
                        "step": length}}
    t0 = time.perf_counter()
    task = k.call("start_sweep", grid, transport="local")
    k.tasks.join(task.task_id)
    wall = time.perf_counter() - t0
    view = k.call("task_status", {"task_id": task.task_id}, transport="local")
    assert view.status == "succeeded", view.error
    rows = [json.loads(x) for x in (Path(view.run_dir) / "results.jsonl").read_text().splitlines()]
    return {"wall": wall, "run": view.progress.elapsed_s, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=4, help="decision points per episode")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port, _ = start_server(Path(tmp) / "home")
        uri = f"mongodb://127.0.0.1:{port}/bench_sweep"
        try:
            k = Kernel(connect(uri), experiments_dir=Path(tmp) / "exp")
            got = {}
            for workers in (1, 2):
                got[workers] = sweep(k, f"w{workers}", workers, args.points)
            db = k.store.db
            sessions = [r["session_id"] for r in got[1]["rows"]]
            docs = list(db.state_events.find({"session_id": {"$in": sessions}}))
            points = sum(r["decision_points"] for r in got[1]["rows"])
            k.close()
        finally:
            stop_server(Path(tmp) / "home")
    events_per_point = len(docs) / points
    bytes_per_point = sum(len(bson.encode(d)) for d in docs) / points
    print(f"8 episodes x {args.points} decision points, 2 universes x 4 windows, offline model, one embedded store")
    print(f"audit per decision point: {events_per_point:.0f} events, {bytes_per_point / 1024:.0f} KB (BSON), "
          f"median episode {statistics.median(r['seconds'] for r in got[1]['rows']):.2f} s alone on a worker")
    print(f"{'workers':>8} {'wall s':>8} {'run s':>7} {'episodes/s':>11} {'points/s':>9} {'events/s':>9} {'KB/s':>7}")
    rate = {}
    for w, g in got.items():
        rate[w] = 8 / g["run"]
        pts = sum(r["decision_points"] for r in g["rows"]) / g["run"]
        print(f"{w:>8} {g['wall']:>8.1f} {g['run']:>7.1f} {rate[w]:>11.3f} {pts:>9.2f} "
              f"{pts * events_per_point:>9.0f} {pts * bytes_per_point / 1024:>7.0f}")
    eff = rate[2] / (2 * rate[1])
    print(f"scaling 1 -> 2 workers: x{rate[2] / rate[1]:.2f} = {eff * 100:.0f}% efficiency (2 cores, the store and the "
          f"driver share them)")
    per_worker = sum(r["decision_points"] for r in got[1]["rows"]) / got[1]["run"]
    for n in (100, 1000):
        ev = per_worker * events_per_point * n
        print(f"projected at {n:>5} workers (offline pace, {per_worker:.2f} points/s each): {ev:,.0f} events/s, "
              f"{ev * bytes_per_point / events_per_point / 1e6:,.1f} MB/s into state_events")
    print(f"RESULT episodes_per_s_1={rate[1]:.3f} episodes_per_s_2={rate[2]:.3f} efficiency={eff:.2f} "
          f"events_per_point={events_per_point:.0f} kb_per_point={bytes_per_point / 1024:.0f} "
          f"points_per_s_worker={per_worker:.2f}")


if __name__ == "__main__":
    main()
