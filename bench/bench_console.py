"""The web console's pages served from a warm store (embedded nx-27017), through `tradegraph serve`'s app on a real
uvicorn server, timed as a browser would see them (the whole response over HTTP):

- the cycle page (the approval screen) of a 20-symbol StockBench cycle, median of 20; target <= 300 ms
- the sessions page with 1,000 sessions in the store, median of 20; target <= 300 ms
- (reported, no target) the same cycle page rebuilt from the log on every request (the console keeps an ended
  cycle while its session's chain head stands, so a reload is served from memory; the first view pays this), and
  the cycle's log page, which carries every prompt and answer and checks the session's hash chain each time

The StockBench cycle is a real one (one decision point of `benchmark stockbench` on its shipped data, offline
model). The 1,000 sessions are a real 1-symbol cycle's events stored again under 1,000 session ids through the
store's append (so each has its summary, as a real session does). Run: PYTHONPATH=. python bench/bench_console.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from database import connect
from database.embedded import start_server, stop_server
from graph.kernel.core import Kernel
from graph.transports.web import views
from graph.transports.web.pages import environment
from tests.console.server import serving

TARGET_MS = 300.0


def timed(client: httpx.Client, url: str, repeats: int) -> tuple[float, list[float], int]:
    client.get(url).raise_for_status()  # warm: the first read fills the caches a server keeps warm
    times, size = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = client.get(url)
        times.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
        size = len(r.content)
    return statistics.median(times), times, size


def copies(kernel: Kernel, n: int) -> None:
    """n sessions, each a real cycle's events under a new session id."""
    out: Any = kernel.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01"})
    events = kernel.store.events.read(out.session_id)
    strip = ("_id", "seq", "prev_hash", "hash")
    for i in range(n - 1):
        sid = f"s-bench{i:07d}"
        batch = []
        for e in events:
            d = {k: v for k, v in e.items() if k not in strip}
            d["session_id"] = sid
            d["cycle_id"] = d["cycle_id"].replace(out.session_id, sid) if d.get("cycle_id") else d.get("cycle_id")
            d["event_id"] = f"{sid}-{e['seq']}"
            batch.append(d)
        kernel.store.events.append(batch)
    kernel.store.sessions.fold_all()  # their summaries, as `tradegraph store reindex` brings them up to date


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("TRADEGRAPH_LLM", "offline")
    home = tempfile.mkdtemp(prefix="tg-bench-console-")
    port, _ = start_server(home)
    kernel = Kernel(
        connect(f"mongodb://127.0.0.1:{port}/console_{uuid.uuid4().hex[:8]}"),
        experiments_dir=Path(home) / "experiments",
    )
    results: dict[str, dict[str, Any]] = {}
    try:
        t0 = time.perf_counter()
        task: Any = kernel.call("start_benchmark", {"start": "2025-03-03", "end": "2025-03-03"})
        *_, last = kernel.watch(task.task_id)
        if last.status != "succeeded":
            print(f"benchmark {last.status}: {last.error}", file=sys.stderr)
            return 1
        recent: Any = kernel.call("list_sessions", {"limit": 5})
        sid = next(s.session_id for s in recent.sessions if len(s.symbols) == 20)
        setup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        copies(kernel, args.sessions)
        fill_s = time.perf_counter() - t0
        every: Any = kernel.call("list_sessions", {"limit": 1000, "all": True})
        listed = len(every.sessions)
        with serving(kernel) as base, httpx.Client(base_url=base, timeout=60) as client:
            for name, url in (
                ("cycle page, 20-symbol StockBench cycle", f"/ui/sessions/{sid}/cycles/1"),
                (f"sessions page, {listed:,} sessions", "/"),
                ("log page of the same cycle (no target)", f"/ui/sessions/{sid}/cycles/1/log"),
            ):
                median, times, size = timed(client, url, args.repeats)
                results[name] = {
                    "median_ms": round(median, 1),
                    "min_ms": round(min(times), 1),
                    "max_ms": round(max(times), 1),
                    "bytes": size,
                }
        env, rebuilt = environment(), []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            env.get_template("cycle.html").render(
                **views.cycle_page(kernel, sid, 1),
                csrf_field="csrf",
                csrf="x",
                token_set=False,
                decided="",
                refusal=None,
            )
            rebuilt.append((time.perf_counter() - t0) * 1000)
        results["cycle page rebuilt from the log each time, in process (no target)"] = {
            "median_ms": round(statistics.median(rebuilt), 1),
            "min_ms": round(min(rebuilt), 1),
            "max_ms": round(max(rebuilt), 1),
            "bytes": 0,
        }
    finally:
        kernel.close()
        stop_server(home)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"setup: StockBench point {setup_s:.1f} s, {args.sessions:,} sessions stored in {fill_s:.1f} s")
        for name, r in results.items():
            target = (
                ""
                if "no target" in name
                else f"  target <= {TARGET_MS:.0f} ms: " + ("met" if r["median_ms"] <= TARGET_MS else "MISSED")
            )
            weight = f", {r['bytes']:,} bytes" if r["bytes"] else ""
            print(f"{name}: median {r['median_ms']} ms (min {r['min_ms']}, max {r['max_ms']}{weight}){target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
