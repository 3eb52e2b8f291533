"""How often a tradegraph process runs Python's cyclic garbage collector: every entry point sets it first."""

from __future__ import annotations

import gc

# Python's default (a collection every 700 allocations) runs the cyclic collector hundreds of times while a command
# imports langchain, langgraph and pydantic's models, none of which is garbage: 0.52 s of an offline cycle's 3.0 s of
# CPU, 0.13 s with these, and the cycle's CPU 18 % less (bench/bench_gc.py, quoted in docs/benchmarks.md). mypy
# tunes its entry point the same way; garbage cycles still go, 50,000 allocations later (+2 MB at most of a
# backtest's 260 MB).
GC_THRESHOLDS = (50_000, 20, 100)


def collect_garbage_less_often() -> None:
    gc.set_threshold(*GC_THRESHOLDS)
