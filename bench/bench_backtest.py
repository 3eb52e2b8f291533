"""Backtest throughput: decision points/s with the offline model on the embedded nx-27017 store.

4 symbols, one graph cycle per decision point, plus the share of wall time spent in the store
(main-thread calls; the buffered audit writer flushes on its own thread), in feature building
(FeatureBundle assembly) and in the rest of the graph (LLM passes, validation, execution, logs).
Run: PYTHONPATH=. python bench/bench_backtest.py [--points 60] [--every 1]
"""

from __future__ import annotations

import argparse
import functools
import inspect
import tempfile
import threading
import time
from collections import defaultdict

from agent.config import AgentConfig
from database import connect
from database.embedded import start_server, stop_server
from graph.machine.cycle_context import default_services
from graph.services.backtest.loop import run_backtest
from schemas.simulation import EpisodeConfig

TIMES: dict[str, float] = defaultdict(float)
MAIN = threading.main_thread()


def timed(bucket: str, fn):
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        if threading.current_thread() is not MAIN:
            return fn(*a, **kw)
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            TIMES[bucket] += time.perf_counter() - t0

    return wrapper


def instrument_store(store) -> None:
    for obj in (store.events, store.portfolios, store.executions):
        for name in dir(obj):
            if name.startswith("_") or name == "col":
                continue
            attr = getattr(obj, name)
            if inspect.ismethod(attr):
                setattr(obj, name, timed("store", attr))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--symbols", default="AAPL,MSFT,IBM,GOOG")
    ap.add_argument("--start", default="2011-01-03")
    ap.add_argument("--points", type=int, default=60)
    ap.add_argument("--every", type=int, default=1)
    args = ap.parse_args()

    home = tempfile.mkdtemp(prefix="tg-bench-bt-")
    port, _ = start_server(home)
    try:
        store = connect(f"mongodb://127.0.0.1:{port}/bench_bt")
        instrument_store(store)
        rt = default_services(AgentConfig.from_env(provider="offline"))
        import graph.machine.market_source as ms

        ms.build_bundle = timed("features", ms.build_bundle)  # what the live market source calls
        # warm-up: indicator frames and model construction are one-off costs, not per-cycle ones
        warm = EpisodeConfig(
            episode_id="warm",
            tickers=args.symbols.split(","),
            initial_cash=100_000,
            start="2010-06-01",
            end="2010-06-10",
            every=1,
        )
        run_backtest(warm, store, progress=False, services=rt, out_dir=f"{home}/exp")
        TIMES.clear()
        import pandas as pd

        end = (pd.Timestamp(args.start) + pd.tseries.offsets.BDay(args.points * args.every + 10)).strftime("%Y-%m-%d")
        cfg = EpisodeConfig(
            episode_id="bench",
            tickers=args.symbols.split(","),
            initial_cash=100_000,
            start=args.start,
            end=end,
            every=args.every,
        )
        t0 = time.perf_counter()
        res = run_backtest(cfg, store, progress=False, services=rt, out_dir=f"{home}/exp", max_steps=args.points)
        wall = time.perf_counter() - t0
        n = res.decision_points
        graph = wall - TIMES["store"] - TIMES["features"]
        print(f"{n} decision points, {len(args.symbols.split(','))} symbols, offline model, embedded store")
        print(f"throughput: {n / wall:.2f} decision points/s ({wall / n * 1000:.0f} ms each; target >= 10/s)")
        for k, v in (
            ("graph (LLM passes, validation, execution, logging)", graph),
            ("store (main thread)", TIMES["store"]),
            ("features (bundle assembly)", TIMES["features"]),
        ):
            print(f"  {k:<52} {v / wall * 100:5.1f}%  {v / n * 1000:7.1f} ms/point")
        print(f"RESULT points_per_s={n / wall:.2f} ms_per_point={wall / n * 1000:.0f} graph_share={graph / wall:.2f}")
        store.close()
    finally:
        stop_server(home)


if __name__ == "__main__":
    main()
