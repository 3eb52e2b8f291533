"""Cycle time with audit on and off, on the embedded store (the default path).

Run: .venv/bin/python bench/bench_cycle.py [--repeats N] [--breakdown]
Prints the median seconds per 4-symbol offline cycle each way and their ratio. --breakdown also says where
the audit's time goes: the main thread's waits at the barrier and at close (the batches still in flight, then
the journal sync), the writer thread's CPU, and a third mode with the store's writes stubbed out (what the
callbacks and events cost before anything is stored).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from database import embedded
from database.connection import connect
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine

DATES = [
    "2010-03-01",
    "2010-06-01",
    "2010-09-01",
    "2010-12-01",
    "2011-03-01",
    "2011-06-01",
    "2011-09-01",
    "2011-12-01",
    "2012-03-01",
    "2012-06-01",
]
SYMBOLS = "AAPL,MSFT,IBM,GOOG"


WAITS: dict[str, float] = {}


def _timed(obj, name: str, key: str, clock=time.perf_counter) -> None:
    fn = getattr(obj, name)

    def wrapper(*a, **kw):
        t = clock()
        try:
            return fn(*a, **kw)
        finally:
            WAITS[key] = WAITS.get(key, 0.0) + clock() - t

    setattr(obj, name, wrapper)


def instrument() -> dict[str, bool]:
    """Times the audit's waits and the writer thread's CPU; returns a switch that stubs the store's writes."""
    from database.events import EventStore
    from database.writer import BufferedEventWriter

    _timed(BufferedEventWriter, "_flush", "tail")  # barrier and close: batches still to store
    _timed(EventStore, "sync", "journal sync")  # barrier and close: the `j` write
    _timed(BufferedEventWriter, "_run", "writer thread CPU", time.thread_time)
    stub = {"on": False}
    append, sync = EventStore._append, EventStore.sync
    patched: Any = EventStore  # the class's methods swapped for this process's timing only
    patched._append = lambda self, events: [] if stub["on"] else append(self, events)
    patched.sync = lambda self: None if stub["on"] else sync(self)
    return stub


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--breakdown", action="store_true")
    args = ap.parse_args()
    stub = instrument() if args.breakdown else None
    home = tempfile.mkdtemp(prefix="tg-bench-")
    port, _ = embedded.start_server(home)
    try:
        store = connect(f"mongodb://127.0.0.1:{port}/bench")
        rt = default_services()
        run_state_machine(SYMBOLS, DATES[0], store=store, services=rt)  # warm caches (indicator frames, imports)
        times: dict[bool, list[float]] = {True: [], False: []}
        stubbed: list[float] = []
        events = calls = tokens = 0
        WAITS.clear()
        for _ in range(args.repeats):
            for d in DATES:
                for audit in (False, True):  # interleaved, so drift hits both alike
                    t = time.perf_counter()
                    out = run_state_machine(SYMBOLS, d, store=store, services=rt, audit=audit)
                    times[audit].append(time.perf_counter() - t)
                    if audit:
                        events, calls, tokens = out.events, out.llm_calls, out.tokens.get("total_tokens", 0)
                if stub is not None:
                    saved = dict(WAITS)
                    stub["on"] = True
                    t = time.perf_counter()
                    run_state_machine(SYMBOLS, d, store=store, services=rt, audit=True)
                    stubbed.append(time.perf_counter() - t)
                    stub["on"] = False
                    WAITS.clear()
                    WAITS.update(saved)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print(f"cycles: {len(times[True])} per mode, {SYMBOLS}, offline model, embedded nx-27017 store")
        print(f"per cycle: {events} events, {calls} LLM calls, {tokens} tokens (estimated)")
        print(f"median cycle, audit off: {off * 1000:.1f} ms")
        print(f"median cycle, audit on:  {on * 1000:.1f} ms")
        if stub is not None:
            n = len(times[True])
            print(
                f"median cycle, audit on, store writes stubbed: {statistics.median(stubbed) * 1000:.1f} ms "
                f"({statistics.median(stubbed) / off:.2f}x: the callbacks and events alone)"
            )
            for k in ("tail", "journal sync", "writer thread CPU"):
                print(f"  {k:<20} {WAITS.get(k, 0.0) / n * 1000:6.1f} ms per audited cycle")
        print(f"RESULT audit_on_ms={on * 1000:.1f} audit_off_ms={off * 1000:.1f} ratio={on / off:.2f}")
        store.close()
    finally:
        embedded.stop_server(home)


if __name__ == "__main__":
    main()
