"""Memory retrieval speed: one agent's recall (HybridIndex.search: filters, floor, BM25 via bm25s, hashed dense,
RRF) over 10k and 100k memories, and what adding a memory costs. Run: PYTHONPATH=. python bench/bench_memory.py

Memories are synthetic but shaped like the real ones (review and cycle texts over 20 symbols, regime words,
outcomes), spread over ten years. Each query is an agent's words plus a random setup, for a random symbol,
before a date in the middle, as the agents of one cycle ask. BM25 is scored over exactly the records a search
may see (point in time), so the first search of a symbol at a date whose visible records differ builds a bm25s
index of them: timed apart, once after the index is built and once per new date (what each symbol of a
backtest cycle pays when memories became known since the last cycle). Seeded: the same corpus and queries.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time

from agent.memory.index import HybridIndex
from schemas.memory import MemoryRecord

SYMBOLS = [f"S{i:02d}" for i in range(20)]
REGIME = [
    ("uptrend", "downtrend"),
    ("above_sma50", "below_sma50"),
    ("rsi_overbought", "rsi_neutral", "rsi_oversold"),
    ("macd_positive", "macd_negative"),
    ("high_volatility", "normal_volatility", "low_volatility"),
]
AGENT_WORDS = [
    ["chart", "trend", "momentum"],
    ["news", "headline"],
    ["long", "win", "target"],
    ["loss", "stop", "falsified"],
    ["stop", "target", "horizon"],
]


def setup(rng: random.Random) -> list[str]:
    return [rng.choice(group) for group in REGIME]


def corpus(n: int, seed: int = 7) -> list[MemoryRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sym, words = rng.choice(SYMBOLS), " ".join(setup(rng))
        day = f"{2010 + i * 10 // n}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if rng.random() < 0.4:
            reason = rng.choice(["stop", "target", "horizon", "signal"])
            outcome, signal = {"stop": ("loss", "Falsified"), "target": ("win", "Realized")}.get(
                reason, ("scratch", "Weakened")
            )
            text = (
                f"{sym} LONG setup {words}; {reason} exit after {rng.randint(1, 10)} sessions: {outcome}, thesis "
                f"{signal.lower()}. Lesson: in {words}, {rng.choice(['wait for confirmation', 'size smaller'])}."
            )
            out.append(
                MemoryRecord.model_validate(
                    {
                        "memory_id": f"m{i}",
                        "kind": "review",
                        "symbol": sym,
                        "direction": "LONG",
                        "outcome": outcome,
                        "signal": signal,
                        "known_at": day,
                        "session_id": f"s{i % 50}",
                        "text": text,
                    }
                )
            )
        else:
            text = (
                f"{sym} LONG setup {words}; conviction 0.{rng.randint(30, 95)}; BUY {rng.randint(1, 500)}; completed."
            )
            out.append(
                MemoryRecord(
                    memory_id=f"m{i}",
                    kind="cycle",
                    symbol=sym,
                    direction="LONG",
                    known_at=day,
                    session_id=f"s{i % 50}",
                    text=text,
                )
            )
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def add_then_search(index, record, query: str, symbol: str, before: str) -> None:
    index.add([record])
    index.search(query, symbol=symbol, before=before, k=3)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def bench(n: int, queries: int, adds: int, before: str = "2015-01-01") -> dict:
    records = corpus(n)
    index = HybridIndex()
    bulk_ms = timed(lambda: index.add(records))
    rng = random.Random(11)
    asks = [(" ".join(rng.choice(AGENT_WORDS) + setup(rng)), rng.choice(SYMBOLS)) for _ in range(queries)]
    # the first search of each symbol after the build: its partition, then its BM25 view (excluded below)
    first = [timed(lambda sym=sym: index.search(asks[0][0], symbol=sym, before=before, k=3)) for sym in SYMBOLS]
    times, hits = [], 0
    for query, symbol in asks:
        t0 = time.perf_counter()
        hits += len(index.search(query, symbol=symbol, before=before, k=3))
        times.append((time.perf_counter() - t0) * 1e3)
    # a new date: the visible records change, so the symbol's view is built anew (the partition is kept)
    days = [f"{y}-{m:02d}-15" for y in range(2013, 2017) for m in range(1, 13)]
    new_date = [timed(lambda d=d, q=q, s=s: index.search(q, symbol=s, before=d, k=3)) for d, (q, s) in zip(days, asks)]
    # one memory added between two recalls, as MEMORIZING does between cycles, into the partition the next
    # search reads and known before its date: the worst case, both partition and view are rebuilt
    symbol = asks[0][1]
    add_ms = []
    for j in range(adds):
        extra = corpus(1, seed=1000 + j)[0].model_copy(
            update={"memory_id": f"new{j}", "symbol": symbol, "known_at": "2012-06-01"}
        )
        add_ms.append(timed(functools.partial(add_then_search, index, extra, asks[0][0], symbol, before)))
    return {
        "n": n,
        "bulk_us": bulk_ms / n * 1e3,
        "first_ms": statistics.median(first),
        "p50": statistics.median(times),
        "p95": percentile(times, 0.95),
        "hits": hits / queries,
        "new_p50": statistics.median(new_date),
        "new_p95": percentile(new_date, 0.95),
        "add_ms": statistics.median(add_ms),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--adds", type=int, default=9)
    args = ap.parse_args()
    rows = [bench(int(n), args.queries, args.adds) for n in args.sizes.split(",")]
    print(
        f"one recall (symbol filter, known before 2015-01-01, k=3), {args.queries} queries per size; medians of "
        f"{len(SYMBOLS)} first searches and of {args.adds} adds\n"
    )
    print(
        "| memories | search p50 | search p95 | hits/query | first search after a build | search at a new date "
        "p50 / p95 | add one + next search | bulk add per record |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['n']:,} | {r['p50']:.2f} ms | {r['p95']:.2f} ms | {r['hits']:.2f} | {r['first_ms']:.1f} ms | "
            f"{r['new_p50']:.1f} / {r['new_p95']:.1f} ms | {r['add_ms']:.1f} ms | {r['bulk_us']:.0f} µs |"
        )
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(
            f"\n{b['n'] // a['n']}× the memories: p50 ×{b['p50'] / a['p50']:.1f}, p95 ×{b['p95'] / a['p95']:.1f}, "
            f"new date ×{b['new_p50'] / a['new_p50']:.1f}, add + next search ×{b['add_ms'] / a['add_ms']:.1f}"
        )
    print(f"target p95 ≤ 5 ms at 10k: {'met' if rows[0]['p95'] <= 5 else 'MISSED'} ({rows[0]['p95']:.2f} ms)")


if __name__ == "__main__":
    main()
