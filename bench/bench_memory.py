"""Memory retrieval speed: one agent's recall (HybridIndex.search: filters, floor, BM25 via bm25s, hashed dense,
RRF) over 10k and 100k memories, and what adding a memory costs. Run: PYTHONPATH=. python bench/bench_memory.py

Memories are synthetic but shaped like the real ones (review and cycle texts over 20 symbols, regime words,
outcomes), spread over ten years; each query is an agent's words plus a random setup, for a random symbol, at
a random date, as a cycle would ask. Seeded: the same corpus and queries every run.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from agent.memory.index import HybridIndex
from schemas.memory import MemoryRecord

SYMBOLS = [f"S{i:02d}" for i in range(20)]
REGIME = [("uptrend", "downtrend"), ("above_sma50", "below_sma50"), ("rsi_overbought", "rsi_neutral", "rsi_oversold"),
          ("macd_positive", "macd_negative"), ("high_volatility", "normal_volatility", "low_volatility")]
AGENT_WORDS = [["chart", "trend", "momentum"], ["news", "headline"], ["long", "win", "target"],
               ["loss", "stop", "falsified"], ["stop", "target", "horizon"]]


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
                reason, ("scratch", "Weakened"))
            text = (f"{sym} LONG setup {words}; {reason} exit after {rng.randint(1, 10)} sessions: {outcome}, thesis "
                    f"{signal.lower()}. Lesson: in {words}, {rng.choice(['wait for confirmation', 'size smaller'])}.")
            out.append(MemoryRecord(memory_id=f"m{i}", kind="review", symbol=sym, direction="LONG", outcome=outcome,
                                    signal=signal, known_at=day, session_id=f"s{i % 50}", text=text))
        else:
            text = f"{sym} LONG setup {words}; conviction 0.{rng.randint(30, 95)}; BUY {rng.randint(1, 500)}; completed."
            out.append(MemoryRecord(memory_id=f"m{i}", kind="cycle", symbol=sym, direction="LONG", known_at=day,
                                    session_id=f"s{i % 50}", text=text))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bench(n: int, queries: int, adds: int) -> dict:
    records = corpus(n)
    index = HybridIndex()
    t0 = time.perf_counter()
    index.add(records)
    embed_s = time.perf_counter() - t0
    rng = random.Random(11)
    asks = [(" ".join(rng.choice(AGENT_WORDS) + setup(rng)), rng.choice(SYMBOLS),
             f"{rng.randint(2011, 2019)}-{rng.randint(1, 12):02d}-15") for _ in range(queries + 1)]
    # a symbol's first search builds its partition's BM25 index (once per process and symbol): timed apart
    builds = []
    for sym in SYMBOLS:
        t0 = time.perf_counter()
        index.search(asks[0][0], symbol=sym, before=asks[0][2], k=3)
        builds.append((time.perf_counter() - t0) * 1e3)
    build_ms = statistics.median(builds)
    times, hits = [], 0
    for query, symbol, before in asks[1:]:
        t0 = time.perf_counter()
        found = index.search(query, symbol=symbol, before=before, k=3)
        times.append((time.perf_counter() - t0) * 1e3)
        hits += len(found)
    # adding one memory between two recalls, as MEMORIZING does between cycles: the add and the next search
    add_ms = []
    for j in range(adds):
        # into the partition the next search reads: the worst case, it is re-indexed
        extra = corpus(1, seed=1000 + j)[0].model_copy(update={"memory_id": f"new{j}", "symbol": asks[1][1]})
        t0 = time.perf_counter()
        index.add([extra])
        index.search(asks[1][0], symbol=asks[1][1], before=asks[1][2], k=3)
        add_ms.append((time.perf_counter() - t0) * 1e3)
    return {"n": n, "embed_per_record_us": embed_s / n * 1e6, "build_ms": build_ms,
            "p50": statistics.median(times), "p95": percentile(times, 0.95), "hits_per_query": hits / queries,
            "add_then_search_ms": statistics.median(add_ms)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--adds", type=int, default=5)
    args = ap.parse_args()
    rows = [bench(int(n), args.queries, args.adds) for n in args.sizes.split(",")]
    print("| memories | search p50 | search p95 | hits/query | first search of a symbol (builds its BM25) | add one + next search (same symbol) | "
          "embed per record |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {r['p50']:.2f} ms | {r['p95']:.2f} ms | {r['hits_per_query']:.2f} | "
              f"{r['build_ms']:.0f} ms | {r['add_then_search_ms']:.0f} ms | {r['embed_per_record_us']:.0f} µs |")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"\n{b['n'] // a['n']}× the memories: p50 ×{b['p50'] / a['p50']:.1f}, p95 ×{b['p95'] / a['p95']:.1f}, "
              f"add + next search ×{b['add_then_search_ms'] / a['add_then_search_ms']:.1f}")
    print(f"target p95 ≤ 5 ms at 10k: {'met' if rows[0]['p95'] <= 5 else 'MISSED'} ({rows[0]['p95']:.2f} ms)")


if __name__ == "__main__":
    main()
