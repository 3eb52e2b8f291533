"""The broker path against the fake Alpaca (tests/fakes/fake_alpaca.py) on the embedded nx-27017 store.

1. Overhead of a 20-symbol cycle: from EXECUTING's call into the broker backend (the approval has resumed the
   cycle) to the fake (in a process of its own) receiving the last order, minus the time the fake itself spent
   answering the requests made before it (its own latency, `--latency-ms` added to each): the checks, the intents recorded and acknowledged by
   the store (the audit barrier), the SDK's request building and parsing. Target: median <= 50 ms.
2. `broker reconcile` of a session with 1,000 orders, once with every order already up to date and once with every
   one filled since last seen (1,000 late order_update events and book entries). Target: <= 2 s.
Run: PYTHONPATH=. python bench/bench_broker.py
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.brokers.client_ids import client_order_id
from database import connect
from database.broker import BrokerOrders, BrokerSessions
from database.embedded import start_server, stop_server
from graph.services.broker.reconcile import reconcile
from schemas.portfolio import PortfolioSnapshot
from tests.brokers.harness import backend, decision, run
from tests.fakes.fake_alpaca import FakeAlpaca

SYMBOLS = [f"S{i:02d}" for i in range(20)]
STATE = ("state", "broker_order_id", "status", "filled_quantity", "avg_price")


def _fake_process(conn, prices: dict[str, float], latency_s: float) -> None:
    """The fake in a process of its own, so its work does not share the measured process's interpreter (GIL)."""
    fake = FakeAlpaca(prices=prices, cash=1e9, latency_s=latency_s).start()
    conn.send(fake.url)
    conn.recv()  # asked for its figures once the cycle is done
    conn.send((list(fake.served), fake.last_post_at, len(fake.orders)))
    fake.stop()


def _union(spans: list[tuple[float, float]]) -> float:
    """How long the fake was busy: its answers overlap when requests run at once, so their spans are merged."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def overhead(uri: str, repeats: int, latency_ms: float) -> list[tuple[float, float, float]]:
    """(elapsed, broker's own, overhead) in ms, per cycle."""
    out = []
    for _ in range(repeats):
        ours, theirs = mp.Pipe()
        proc = mp.get_context("spawn").Process(
            target=_fake_process, args=(theirs, {s: 10.0 for s in SYMBOLS}, latency_ms / 1000)
        )
        proc.start()
        fake = SimpleNamespace(url=ours.recv())
        store = connect(
            f"mongomock://bb_{uuid.uuid4().hex[:8]}" if uri == "mongomock" else f"{uri}/bb_{uuid.uuid4().hex[:8]}"
        )
        try:
            exe = backend(store, fake)
            store.portfolios.commit("s-broker", PortfolioSnapshot(cash=1e9, as_of="2026-11-27"), "s-broker:c0", 0)
            d = decision(*[(s, "BUY", 10) for s in SYMBOLS])
            started = time.time()
            result = run(exe, d, prices={s: 10.0 for s in SYMBOLS})
            ours.send("stats")
            served, last, orders = ours.recv()
            own = _union([(a, min(b, last)) for a, b in served if a <= last])
            elapsed = (last - started) * 1000
            out.append((elapsed, own * 1000, elapsed - own * 1000))
            assert orders == 20, result.result.message
        finally:
            proc.join(10)
            store.close()
    return out


def reconcile_time(uri: str, n: int, late: bool) -> float:
    fake = FakeAlpaca(prices={s: 10.0 for s in SYMBOLS}, cash=1e10).start()
    store = connect(f"{uri}/br_{uuid.uuid4().hex[:8]}")
    try:
        sid = "s-rec"
        exe = backend(store, fake)
        store.portfolios.commit(sid, PortfolioSnapshot(cash=1e10, as_of="2026-11-27"), f"{sid}:c0", 0)
        BrokerSessions(store.db).bind(sid, "alpaca", "127.0.0.1")
        orders = BrokerOrders(store.db)
        docs = []
        for i in range(n):
            sym, cid = SYMBOLS[i % 20], client_order_id(sid, f"{sid}:c{1 + i // 20}", SYMBOLS[i % 20], i % 20)
            status, o = fake.handle(
                "POST",
                "/v2/orders",
                {},
                {"client_order_id": cid, "symbol": sym, "qty": "1", "side": "sell" if late else "buy"},
            )
            docs.append(
                {
                    "_id": cid,
                    "session_id": sid,
                    "cycle_id": f"{sid}:c{1 + i // 20}",
                    "symbol": sym,
                    "side": "SELL" if late else "BUY",
                    "quantity": 1.0,
                    "leg": i % 20,
                    "day": "2026-11-27",
                    "state": "acked",
                    "broker_order_id": o["id"],
                    "status": "new" if late else "filled",
                    "filled_quantity": 0.0 if late else 1.0,
                    "avg_price": None if late else 10.0,
                }
            )
        orders.col.insert_many([{k: v for k, v in d.items() if k not in STATE} for d in docs])
        orders.set_state(sid, {d["_id"]: {k: d[k] for k in STATE} for d in docs})
        if late:  # sells of what the fake and the book both hold, all filled after the cycle
            from schemas.portfolio import Position

            store.portfolios.commit(
                sid,
                PortfolioSnapshot(
                    cash=1e10,
                    as_of="2026-11-27",
                    positions={s: Position(symbol=s, quantity=n, avg_price=10.0) for s in SYMBOLS},
                ),
                f"{sid}:c00",
                1,
            )
            for s in SYMBOLS:
                fake.positions[s] = (float(n), 10.0)
            with fake.lock:
                for o in fake.orders:
                    fake._fill(o, 1.0)
        else:
            fake.cash = 1e10
        started = time.perf_counter()
        report = reconcile(exe.broker, store, sid)
        took = time.perf_counter() - started
        assert report["orders"] == n and len(report["updated"]) == (n if late else 0), report["updated"][:2]
        return took
    finally:
        fake.stop()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--latency-ms", type=float, default=2.0)
    ap.add_argument("--orders", type=int, default=1000)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench_broker_"))
    port, _ = start_server(home)
    uri = f"mongodb://127.0.0.1:{port}"
    try:
        rows = overhead(uri, args.repeats, args.latency_ms)
        med = statistics.median(r[2] for r in rows)
        print(f"20-symbol cycle, {args.repeats} runs, fake latency {args.latency_ms:g} ms/request:")
        print(
            f"  elapsed to last order median {statistics.median(r[0] for r in rows):.1f} ms, broker's own "
            f"{statistics.median(r[1] for r in rows):.1f} ms, tradegraph's overhead median {med:.1f} ms "
            f"(min {min(r[2] for r in rows):.1f}, max {max(r[2] for r in rows):.1f}); target <= 50 ms: "
            f"{'met' if med <= 50 else 'MISSED'}"
        )
        mock = overhead("mongomock", args.repeats, args.latency_ms)
        print(
            f"  the same on an in-process mongomock store (the store's round trips taken out): overhead median "
            f"{statistics.median(r[2] for r in mock):.1f} ms"
        )
        clean = reconcile_time(uri, args.orders, late=False)
        late = reconcile_time(uri, args.orders, late=True)
        print(
            f"reconcile of {args.orders} orders: {clean:.2f} s all current, {late:.2f} s all filled late "
            f"(target <= 2 s: {'met' if max(clean, late) <= 2 else 'MISSED'})"
        )
    finally:
        stop_server(home)


if __name__ == "__main__":
    main()
