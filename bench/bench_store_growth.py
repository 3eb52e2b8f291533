"""Store growth: what listing sessions costs with 1,000,000 events in the embedded store, and what a backtest decision
point costs on disk.

1. Seed: one real offline backtest (2 symbols, every 5 sessions, as bench/bench_sweep.py's episodes) into an empty
   embedded store. kb_per_point is the store's bytes on disk (its whole data folder, the server stopped so SQLite
   has checkpointed its WAL) added by the seed, divided by its decision points: measured on real cycles only.
2. Fill: copies of the seed session, each a new backtest session (`bt-growth-copy-NNNNN`), until the store holds
   --events events. A copy is the seed's events re-keyed (new event ids, session and cycle ids) and appended through
   the store's own append (validated, hash-chained from seq 1, chain head moved), then folded into its summary as
   a writer's close would. The copies' payloads repeat the seed's, so whatever a store does to repeated content
   would flatter them: the per-point figure never comes from them.
3. Measure: `list_sessions` (limit 50) through the kernel, as every transport calls it: one warm-up, then the
   median of --repeats.

Resumable: the store lives under --home (default out/bench_store_growth); run it again and it continues where it
stopped (a copy is idempotent by event id). Measured on this 2-core machine shared with other work: the seed 24 s,
the fill 9 min (322 copies, 1.06 GB), 9 min 36 s in all; a second run only measures (seconds).
Run: PYTHONPATH=. .venv/bin/python bench/bench_store_growth.py [--events 1000000] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import cast

SEED_RUN = "growth-seed"
COPY_PREFIX = "bt-growth-copy-"
APPEND_BATCH = 1000


def disk_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in (home / "data").glob("*") if p.is_file())


def seed(home: Path, args) -> dict:
    """The seed backtest and its cost on disk, once (kept in seed.json)."""
    from agent.config import AgentConfig
    from database.connection import connect
    from graph.machine.cycle_context import default_services
    from graph.services.backtest.loop import run_backtest
    from schemas.simulation import EpisodeConfig

    done = home / "seed.json"
    if done.exists():
        return json.loads(done.read_text())
    connect(home=home / "store").close()  # an empty store: its indexes, then the server stops
    before = disk_bytes(home / "store")
    cfg = EpisodeConfig(
        episode_id=SEED_RUN,
        tickers=args.symbols.split(","),
        initial_cash=100_000,
        start=args.start,
        end=args.end,
        every=args.every,
    )
    t0 = time.perf_counter()
    store = connect(home=home / "store")
    try:
        res = run_backtest(
            cfg,
            store,
            progress=sys.stderr.isatty(),
            out_dir=home / "experiments",
            services=default_services(AgentConfig.from_env(provider="offline")),
        )
        summary = store.sessions.get(f"bt-{SEED_RUN}")
        assert summary is not None, "the seed run's session has no summary"
    finally:
        store.close()
    after = disk_bytes(home / "store")
    out = {
        "points": res.decision_points,
        "events": summary["events"],
        "seconds": round(time.perf_counter() - t0, 1),
        "disk_bytes": after - before,
        "json_bytes": summary["bytes"],
        "kb_per_point": round((after - before) / res.decision_points / 1024, 1),
        "json_kb_per_point": round(summary["bytes"] / res.decision_points / 1024, 1),
    }
    done.write_text(json.dumps(out, indent=1))
    return out


def fill(home: Path, target: int) -> dict:
    """Copies of the seed until the store holds `target` events; returns what this run added."""
    from database.connection import connect

    store = connect(home=home / "store")
    t0, added, copies = time.perf_counter(), 0, 0
    try:
        template = store.events.read(f"bt-{SEED_RUN}")
        origin = f"bt-{SEED_RUN}"
        done = {d["_id"]: int(d["events"]) for d in store.sessions.col.find({"kind": "backtest"}, {"events": 1})}
        total = sum(done.values())
        i = 0
        while total < target:
            i += 1
            sid = f"{COPY_PREFIX}{i:05d}"
            if done.get(sid) == len(template):
                continue
            shift = i * 0.001  # each copy a little later than the last, as if written after it
            batch = []
            for e in template:
                batch.append(
                    {
                        **{k: v for k, v in e.items() if k not in ("seq", "prev_hash", "hash")},
                        "event_id": f"{e['event_id']}-{i}",
                        "session_id": sid,
                        "ts": e["ts"] + shift,
                        "cycle_id": sid + e["cycle_id"][len(origin) :],
                    }
                )
                if len(batch) == APPEND_BATCH:
                    added += len(store.events.append(batch))
                    batch = []
            if batch:
                added += len(store.events.append(batch))
            store.sessions.fold(sid)
            total += len(template) - done.get(sid, 0)
            copies += 1
            if sys.stderr.isatty():
                print(
                    f"\rfilling: {total:,} / {target:,} events ({copies} copies this run)",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
        if sys.stderr.isatty():
            print(file=sys.stderr)
    finally:
        store.close()
    return {"copies": copies, "events_added": added, "seconds": round(time.perf_counter() - t0, 1)}


def measure(home: Path, repeats: int) -> dict:
    from database.connection import connect
    from graph.kernel.core import Kernel
    from graph.kernel.models import SessionsOutput

    store = connect(home=home / "store")
    try:
        events = store.events.col.estimated_document_count()
        k = Kernel(store, experiments_dir=home / "experiments")
        k.call("list_sessions", {"limit": 50})  # warm-up: the first query pays for opening SQLite's pages
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = cast(SessionsOutput, k.call("list_sessions", {"limit": 50}))
            times.append((time.perf_counter() - t0) * 1000)
        sessions = store.sessions.col.estimated_document_count()
    finally:
        store.close()
    return {
        "events": events,
        "sessions": sessions,
        "listed": len(out.sessions),
        "list_ms": times,
        "disk_bytes": disk_bytes(home / "store"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", default="out/bench_store_growth", help="where the store is kept between runs")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--symbols", default="AAPL,MSFT")
    ap.add_argument("--start", default="2011-01-03")
    ap.add_argument("--end", default="2011-06-30")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    os.environ.pop("MONGODB_URI", None)  # what is measured is the embedded store under --home, never another
    home = Path(args.home).resolve()
    home.mkdir(parents=True, exist_ok=True)

    s = seed(home, args)
    print(
        f"seed: one offline backtest, {args.symbols}, every {args.every}: {s['points']} decision points, "
        f"{s['events']:,} events in {s['seconds']} s; on disk {s['disk_bytes'] / 1e6:.1f} MB = {s['kb_per_point']} KB "
        f"per point ({s['events'] / s['points']:.0f} events; {s['json_kb_per_point']} KB of them as JSON)"
    )
    f = fill(home, args.events)
    print(f"fill: {f['copies']} copies of the seed added {f['events_added']:,} events in {f['seconds']} s")
    m = measure(home, args.repeats)
    ms = statistics.median(m["list_ms"])
    print(f"store: {m['events']:,} events in {m['sessions']} session summaries, {m['disk_bytes'] / 1e9:.2f} GB on disk")
    print(
        f"list_sessions, limit 50 ({m['listed']} listed): median {ms:.1f} ms over {args.repeats} "
        f"(min {min(m['list_ms']):.1f}, max {max(m['list_ms']):.1f}); target <= 50 ms"
    )
    print(f"RESULT sessions_list_ms={ms:.1f} events={m['events']} kb_per_point={s['kb_per_point']}")


if __name__ == "__main__":
    main()
