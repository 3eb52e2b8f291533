"""Cycle time with audit on and off, on the embedded store (the default path).

Run: .venv/bin/python bench/bench_cycle.py [--repeats N]
Prints the median seconds per 4-symbol offline cycle each way and their ratio.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from database import embedded  # noqa: E402
from database.connection import connect  # noqa: E402
from graph.runner import run_cycle  # noqa: E402
from graph.runtime import default_runtime  # noqa: E402

DATES = ["2010-03-01", "2010-06-01", "2010-09-01", "2010-12-01", "2011-03-01", "2011-06-01", "2011-09-01",
         "2011-12-01", "2012-03-01", "2012-06-01"]
SYMBOLS = "AAPL,MSFT,IBM,GOOG"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="tg-bench-")
    port, _ = embedded.start_server(home)
    try:
        store = connect(f"mongodb://127.0.0.1:{port}/bench")
        rt = default_runtime()
        run_cycle(SYMBOLS, DATES[0], store=store, runtime=rt)  # warm caches (indicator frames, imports)
        times: dict[bool, list[float]] = {True: [], False: []}
        events = calls = tokens = 0
        for _ in range(args.repeats):
            for d in DATES:
                for audit in (False, True):  # interleaved, so drift hits both alike
                    t = time.perf_counter()
                    out = run_cycle(SYMBOLS, d, store=store, runtime=rt, audit=audit)
                    times[audit].append(time.perf_counter() - t)
                    if audit:
                        events, calls, tokens = out.events, out.llm_calls, out.tokens.get("total_tokens", 0)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print(f"cycles: {len(times[True])} per mode, {SYMBOLS}, offline model, embedded nx-27017 store")
        print(f"per cycle: {events} events, {calls} LLM calls, {tokens} tokens (estimated)")
        print(f"median cycle, audit off: {off * 1000:.1f} ms")
        print(f"median cycle, audit on:  {on * 1000:.1f} ms")
        print(f"RESULT audit_on_ms={on * 1000:.1f} audit_off_ms={off * 1000:.1f} ratio={on / off:.2f}")
        store.close()
    finally:
        embedded.stop_server(home)


if __name__ == "__main__":
    main()
