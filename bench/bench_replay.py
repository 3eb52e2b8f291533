"""Reconstruct speed: load_session_log on sessions of 1k, 10k, 100k events on the embedded nx-27017 server.

The store is opened the way `tradegraph replay` opens it (connect() on the embedded server's home), so a
whole-session read takes the default path: straight from the server's SQLite file (EventStore._read_local).
`--through-server` reads through the wire protocol instead (the path for a store given by URI).

The events are real: one offline cycle is recorded (mongomock), then its events are repeated with
fresh cycle ids, event ids and run ids until the session has N events, so payload sizes and the
kind mix (LLM prompts, SCANNING's bundles, …) are those of real cycles.
Run: PYTHONPATH=. python bench/bench_replay.py [--sizes 1000,10000,100000] [--repeats 5]
Target: ≤ 1 s at 10k events.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import uuid

from database import connect
from database.embedded import start_server, stop_server
from graph.machine.runner import run_state_machine
from graph.services.replay.session import load_session_log


def template() -> list[dict]:
    store = connect(f"mongomock://bench_{uuid.uuid4().hex[:8]}")
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store)
    return [{k: v for k, v in e.items() if k != "seq"} for e in store.events.read(out.session_id)]


def fill(store, session: str, n: int, tpl: list[dict], batch: int = 5000) -> float:
    """Append n events (whole template cycles, the last one cut) in big batches; returns seconds."""
    t0, buf, i, cycle = time.perf_counter(), [], 0, 0
    while i < n:
        cycle += 1
        runs: dict[str, str] = {}
        for e in tpl:
            if i >= n:
                break
            rid = e.get("run_id")
            buf.append(
                {
                    **e,
                    "event_id": uuid.uuid4().hex,
                    "session_id": session,
                    "cycle_id": f"{session}:c{cycle}",
                    "run_id": runs.setdefault(rid, uuid.uuid4().hex) if rid else None,
                    "parent_run_id": runs.setdefault(e["parent_run_id"], uuid.uuid4().hex)
                    if e.get("parent_run_id")
                    else None,
                }
            )
            i += 1
            if len(buf) >= batch:
                store.events.append(buf)
                buf = []
    if buf:
        store.events.append(buf)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--through-server", action="store_true", help="read through nx-27017, not its SQLite file")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    os.environ.pop("MONGODB_URI", None)  # the embedded store below, never a store the shell points at
    tpl = template()
    home = tempfile.mkdtemp(prefix="bench-replay-")
    port, _pid = start_server(home)
    try:
        store = connect(home=home)  # the embedded path, as the CLI: this reuses the server started above
        if args.through_server:
            store.events.local_file = None
        print(f"read path: {'SQLite file ' + str(store.events.local_file) if store.events.local_file else 'nx-27017'}")
        results = []
        for n in sizes:
            session = f"bench-{n}-{uuid.uuid4().hex[:6]}"
            ins = fill(store, session, n, tpl)
            times = []
            for _ in range(args.repeats):
                # each run starts from a collected heap: the previous run's session is freed (and any collection
                # it causes runs) outside the timing, not inside the next run's
                s = None
                gc.collect()
                t0 = time.perf_counter()
                s = load_session_log(store, session)
                times.append(time.perf_counter() - t0)
            assert s is not None and s.events == n and s.gap_free
            med = statistics.median(times)
            results.append((n, med))
            print(
                f"{n:>7} events ({len(s.cycles)} cycles, inserted in {ins:.1f}s): "
                f"median reconstruct {med * 1000:.1f} ms  ({n / med:,.0f} events/s, {args.repeats} runs)"
            )
        growth = []
        for (n0, t0), (n1, t1) in zip(results, results[1:]):
            growth.append(t1 / t0)
            print(f"growth {n0} → {n1} events (x{n1 / n0:g}): time x{t1 / t0:.1f} (linear: <= x{n1 / n0 * 1.1:g})")
        at10k = dict(results).get(10000)
        if at10k is not None:
            print(f"target ≤ 1 s at 10k: {'MET' if at10k <= 1.0 else 'MISSED'} ({at10k:.3f} s)")
        print(
            "RESULT "
            + " ".join(f"reconstruct_{n}_s={t:.3f}" for n, t in results)
            + "".join(f" growth_{i + 1}=x{g:.1f}" for i, g in enumerate(growth))
        )
        store.close()
    finally:
        stop_server(home)


if __name__ == "__main__":
    main()
