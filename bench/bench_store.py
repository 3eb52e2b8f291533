"""Audit-store throughput on the embedded nx-27017 server.

EventStore.append (batches) and BufferedEventWriter vs raw insert_many of the same docs,
plus reading a 10k-event session with one query. Run: PYTHONPATH=. python bench/bench_store.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from database import BufferedEventWriter, connect
from database.embedded import start_server, stop_server


def make_events(session: str, n: int) -> list[dict]:
    return [
        {
            "event_id": f"{session}-{i}",
            "session_id": session,
            "cycle_id": f"c{i // 100}",
            "ts": 1_700_000_000.0 + i,
            "state": "ANALYZING",
            "kind": "llm_response" if i % 2 else "llm_request",
            "payload": {"node": "quant", "step": i, "content": "x" * 200, "usage": {"in": 512, "out": 128}},
        }
        for i in range(n)
    ]


def median_rate(fn: Callable[[str], int], repeats: int) -> tuple[float, list[float]]:
    rates = []
    for _ in range(repeats):
        session = f"bench-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        n = fn(session)
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates), rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--read-events", type=int, default=10_000)
    args = ap.parse_args()

    home = tempfile.mkdtemp(prefix="tg-bench-")
    port, _ = start_server(home)
    store = connect(f"mongodb://127.0.0.1:{port}/bench")
    n, b = args.events, args.batch
    try:
        raw = store.db["raw_events"]

        def raw_insert(session: str) -> int:
            docs = make_events(session, n)
            for i, d in enumerate(docs):  # the same documents append() would store
                d.update(seq=i + 1, schema_version=1, run_id=None, parent_run_id=None)
            for i in range(0, n, b):
                raw.insert_many(docs[i : i + b], ordered=True)
            return n

        def append(session: str) -> int:
            docs = make_events(session, n)
            for i in range(0, n, b):
                store.events.append(docs[i : i + b])
            return n

        def writer(background: bool, threads: int = 1) -> Callable[[str], int]:
            def run(session: str) -> int:
                docs = make_events(session, n)
                w = BufferedEventWriter(store.events, flush_every=b, background=background)
                per = n // threads

                def put_all(part: list[dict]) -> None:
                    for d in part:
                        w.put(d)

                ts = [threading.Thread(target=put_all, args=(docs[k * per : (k + 1) * per],)) for k in range(threads)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                w.close()
                return per * threads

            return run

        def put_latency(session: str) -> float:
            """Mean put() cost on the caller's thread, background writer (what the graph pays)."""
            docs = make_events(session, n)
            w = BufferedEventWriter(store.events, flush_every=b)
            t0 = time.perf_counter()
            for d in docs:
                w.put(d)
            dt = time.perf_counter() - t0
            w.close()
            return dt / n * 1e6

        raw_insert("warmup")
        append("warmup2")
        results = {
            "raw insert_many": median_rate(raw_insert, args.repeats),
            f"EventStore.append (batch {b})": median_rate(append, args.repeats),
            "BufferedEventWriter bg, 1 thread": median_rate(writer(True), args.repeats),
            "BufferedEventWriter bg, 8 threads": median_rate(writer(True, 8), args.repeats),
            "BufferedEventWriter sync, 1 thread": median_rate(writer(False), args.repeats),
        }
        base = results["raw insert_many"][0]
        print(f"embedded nx-27017, {n} events/run, batch {b}, median of {args.repeats}")
        for name, (med, rates) in results.items():
            print(f"  {name:38s} {med:9.0f} ev/s  ({med / base:5.2f}x raw)  runs={[round(r) for r in rates]}")
        lat = statistics.median(put_latency(f"lat-{uuid.uuid4().hex[:6]}") for _ in range(args.repeats))
        print(f"  put() on the caller's thread (bg)      {lat:9.1f} us/event")

        session = f"read-{uuid.uuid4().hex[:8]}"
        docs = make_events(session, args.read_events)
        for i in range(0, len(docs), 1000):
            store.events.append(docs[i : i + 1000])
        reads = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            got = store.events.read(session)
            reads.append(time.perf_counter() - t0)
        assert [e["seq"] for e in got] == list(range(1, args.read_events + 1))
        read_s = statistics.median(reads)
        print(
            f"  read {args.read_events} events (one query)       {read_s * 1000:9.1f} ms  ({args.read_events / read_s:.0f} ev/s)"
        )
        app = results[f"EventStore.append (batch {b})"][0]
        bg = results["BufferedEventWriter bg, 1 thread"][0]
        print(
            f"SUMMARY raw={base:.0f}/s append={app:.0f}/s ({app / base:.2f}x) writer_bg={bg:.0f}/s ({bg / base:.2f}x) "
            f"put={lat:.1f}us read{args.read_events}={read_s * 1000:.0f}ms"
        )
    finally:
        store.close()
        stop_server(home)


if __name__ == "__main__":
    main()
