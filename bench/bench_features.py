"""Feature-layer speed: full-history indicator frames and per-decision bundle assembly.

Tiles the real AAPL/MSFT/IBM/GOOG histories (last 2,500 bars, ~10 years) under 100
synthetic names, then reports medians over a few repeats:
  1. computing every symbol's whole-history indicator frame (target <= 2.5 s), and
  2. assembling one FeatureBundle per symbol at a decision date from the warm cache
     (target <= 2 ms per symbol).
Run: .venv/bin/python bench/bench_features.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.data.market import MarketData, default_market_data
from agent.features.bundle import build_bundle
from agent.features.technical import IndicatorCache

N_SYMBOLS = 100
N_BARS = 2500
BASE = ("AAPL", "MSFT", "IBM", "GOOG")


def tiled_market() -> MarketData:
    real = default_market_data()
    frames = {}
    for k in range(N_SYMBOLS):
        frames[f"S{k:03d}"] = real.bars(BASE[k % len(BASE)]).iloc[-N_BARS:]
    return MarketData(frames, source="bench-tiled")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    market = tiled_market()
    symbols = market.universe()
    decision = market.trading_dates(symbols[0])[-300]

    full_times = []
    cache = IndicatorCache(market)
    for _ in range(args.repeats):
        cache = IndicatorCache(market)
        t0 = time.perf_counter()
        for s in symbols:
            cache.entry(s, market)
        full_times.append(time.perf_counter() - t0)
    full = statistics.median(full_times)

    build_bundle(symbols[0], decision, market, cache=cache)  # import/lazy-load warm-up
    per_symbol = []
    for _ in range(args.repeats):
        for s in symbols:
            t0 = time.perf_counter()
            build_bundle(s, decision, market, cache=cache)
            per_symbol.append(time.perf_counter() - t0)
    bundle_ms = statistics.median(per_symbol) * 1000

    print(f"symbols={len(symbols)} bars/symbol={N_BARS} repeats={args.repeats}")
    print(
        f"full-history indicator frames: median {full:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in full_times)})"
        f"  target <= 2.5 s"
    )
    print(
        f"bundle assembly at {decision.date()}: median {bundle_ms:.3f} ms/symbol "
        f"(p90 {statistics.quantiles(per_symbol, n=10)[-1] * 1000:.3f} ms)  target <= 2 ms"
    )
    print(f"RESULT full_history_s={full:.3f} bundle_ms_per_symbol={bundle_ms:.3f}")


if __name__ == "__main__":
    main()
