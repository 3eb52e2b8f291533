"""The broker path against the fake Alpaca (tests/fakes/fake_alpaca.py) on the embedded nx-27017 store.

1. Overhead of a 20-symbol cycle: from EXECUTING's call into the broker backend (the approval has resumed the
   cycle: the session bound, the cycle's audit log under way, see _as_approved) to the fake (in a process of its own) receiving the last order, minus the time the fake itself spent
   answering the requests made before it (its own latency, `--latency-ms` added to each): the checks, the intents recorded and acknowledged by
   the store (the audit barrier), the SDK's request building and parsing. Target: median <= 50 ms.
2. `broker reconcile` of a session with 1,000 orders, once with every order already up to date and once with every
   one filled since last seen (1,000 late order_update events and book entries). Target: <= 2 s.
`--trips`: instead, per phase of the same cycle (first reads, checks, intents and the audit barrier, waves, after
the last order), the store's round trips (pymongo's command listener) and the process's CPU time, medians over the
repeats: counts that do not depend on the machine's load, to compare code before and after a change.
Run: PYTHONPATH=. python bench/bench_broker.py [--trips]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from pymongo import monitoring

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


def _as_approved(store, exe) -> None:
    """The backend as EXECUTING finds it after an approval: the session bound to the broker (the run bound it when
    it started; choose.py reads that and marks it, `bound`) and the cycle's audit log under way (EXECUTING's audit
    barrier has just stored its earlier events, so the writer knows the log's head). Without this the measured path
    held three store round trips an approved cycle does not make there (the binding, the head read, the head's
    first insert). A backend without `bound` (code before it) binds as it did."""
    from schemas.events import new_event

    BrokerSessions(store.db).bind("s-broker", "alpaca", "127.0.0.1")
    exe.bound = {"s-broker"}
    exe.audit_writer.put(new_event("s-broker", "s-broker:c1", "VALIDATING", "validation", {"ok": True, "check": "x"}))
    exe.audit_writer.flush(durable=True)


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
            _as_approved(store, exe)
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


PHASES = ("first reads", "checks", "intents + barrier", "waves", "after the waves")


class _Phases(monitoring.CommandListener):
    """Which phase the cycle is in (set by the wrapped steps below), the store commands started in each (any
    thread: the audit writer's appends count where they happen), and the process's CPU and wall time at each
    boundary."""

    def __init__(self) -> None:
        self.now = "before"
        self.commands: dict[str, dict[str, int]] = {}
        self.took: dict[str, dict[str, float]] = {}  # phase -> command -> ms, summed
        self.named: dict[int, tuple[str, str]] = {}
        self.appended: dict[str, float] = {}  # phase -> ms of CPU the audit writer's appends took
        self.marks: list[tuple[str, float, float]] = []

    def enter(self, phase: str) -> None:
        self.now = phase
        self.marks.append((phase, time.process_time(), time.perf_counter()))

    def started(self, event) -> None:  # pymongo.monitoring.CommandListener
        name = event.command_name
        if name in ("hello", "ismaster", "endSessions", "ping"):
            return  # the client's monitoring, not the cycle's
        target = event.command.get(name) if isinstance(event.command.get(name), str) else ""
        row = self.commands.setdefault(self.now, {})
        key = f"{name} {target}".strip()
        row[key] = row.get(key, 0) + 1
        self.named[event.request_id] = (self.now, key)

    def succeeded(self, event) -> None:
        phase, key = self.named.pop(event.request_id, ("?", event.command_name))
        row = self.took.setdefault(phase, {})
        row[key] = row.get(key, 0.0) + event.duration_micros / 1000

    def failed(self, event) -> None:
        pass


def trips(uri: str, repeats: int, latency_ms: float) -> None:
    """Round trips and CPU per phase of a 20-symbol cycle (see the module's doc)."""
    import graph.machine.broker.execution as execution

    phases = _Phases()
    monitoring.register(phases)
    cpu: dict[str, list[float]] = {p: [] for p in PHASES}
    wall: dict[str, list[float]] = {p: [] for p in PHASES}
    counts: list[dict[str, dict[str, int]]] = []
    took: list[dict[str, dict[str, float]]] = []
    real_execute, real_presubmit = execution.BrokerExecution.execute, execution.presubmit
    real_send = execution.BrokerExecution._send
    from database.events import EventStore

    real_append = EventStore.append
    appends: dict[str, list[float]] = {p: [] for p in PHASES}  # the audit writer's CPU in its appends, per run

    def append(self, events):
        phase, started = phases.now, time.thread_time()
        try:
            return real_append(self, events)
        finally:
            phases.appended[phase] = phases.appended.get(phase, 0.0) + (time.thread_time() - started) * 1000

    def execute(self, *a, **kw):
        phases.enter("first reads")
        return real_execute(self, *a, **kw)

    def presubmit(*a, **kw):
        phases.enter("checks")
        try:
            return real_presubmit(*a, **kw)
        finally:
            phases.enter("intents + barrier")

    def send(self, *a, **kw):
        phases.enter("waves")
        try:
            return real_send(self, *a, **kw)
        finally:
            phases.enter("after the waves")

    execution.BrokerExecution.execute, execution.BrokerExecution._send = execute, send  # type: ignore[method-assign]
    execution.presubmit = presubmit
    EventStore.append = append  # type: ignore[method-assign]
    try:
        for _ in range(repeats + 1):  # the first cycle warms imports and connections, and is left out
            ours, theirs = mp.Pipe()
            proc = mp.get_context("spawn").Process(
                target=_fake_process, args=(theirs, {s: 10.0 for s in SYMBOLS}, latency_ms / 1000)
            )
            proc.start()
            fake = SimpleNamespace(url=ours.recv())
            store = connect(f"{uri}/bt_{uuid.uuid4().hex[:8]}")
            try:
                exe = backend(store, fake)
                store.portfolios.commit("s-broker", PortfolioSnapshot(cash=1e9, as_of="2026-11-27"), "s-broker:c0", 0)
                _as_approved(store, exe)
                d = decision(*[(s, "BUY", 10) for s in SYMBOLS])
                phases.commands, phases.took, phases.marks, phases.appended = {}, {}, [], {}
                phases.enter("before the call")
                run(exe, d, prices={s: 10.0 for s in SYMBOLS})
                phases.enter("end")
                ours.send("stats")
                ours.recv()
                counts.append(phases.commands)
                took.append(phases.took)
                for p in PHASES:
                    appends[p].append(phases.appended.get(p, 0.0))
                for (p, c0, w0), (_, c1, w1) in zip(phases.marks, phases.marks[1:]):
                    if p in cpu:
                        cpu[p].append((c1 - c0) * 1000)
                        wall[p].append((w1 - w0) * 1000)
            finally:
                proc.join(10)
                store.close()
    finally:
        execution.BrokerExecution.execute, execution.BrokerExecution._send = real_execute, real_send  # type: ignore[method-assign]
        execution.presubmit = real_presubmit
        EventStore.append = real_append  # type: ignore[method-assign]
    counts, took = counts[1:], took[1:]
    print(f"20-symbol cycle, {repeats} runs, per phase: the store's round trips (a range where runs differ), the")
    print("process's CPU and wall time (medians, ms), and each kind of command: how many, its median time in ms")
    total_cpu = 0.0
    for p in PHASES:
        per_run = [sum(c.get(p, {}).values()) for c in counts]
        detail = []
        for k in sorted({k for c in counts for k in c.get(p, {})}):
            ns = [c.get(p, {}).get(k, 0) for c in counts]
            ms = statistics.median(t.get(p, {}).get(k, 0.0) for t in took)
            detail.append(f"{k} {min(ns)}" + (f"-{max(ns)}" if max(ns) != min(ns) else "") + f" {ms:.1f}")
        n = f"{min(per_run)}" + (f"-{max(per_run)}" if max(per_run) != min(per_run) else "")
        c, w = statistics.median(cpu[p][1:]), statistics.median(wall[p][1:])
        total_cpu += c if p != "after the waves" else 0
        a = statistics.median(appends[p][1:])
        print(f"  {p:18} {n:>5} round trips, CPU {c:5.1f} (audit appends {a:4.1f}), wall {w:5.1f}: {', '.join(detail)}")
    print(f"  CPU from the call to the last wave's answers: {total_cpu:.1f} ms")


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
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--latency-ms", type=float, default=2.0)
    ap.add_argument("--orders", type=int, default=1000)
    ap.add_argument("--trips", action="store_true", help="round trips and CPU per phase instead (see the doc)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench_broker_"))
    port, _ = start_server(home)
    uri = f"mongodb://127.0.0.1:{port}"
    try:
        if args.trips:
            return trips(uri, args.repeats, args.latency_ms)
        load_before = os.getloadavg()[0]
        rows = overhead(uri, args.repeats, args.latency_ms)
        med = statistics.median(r[2] for r in rows)
        # the figure moves with the machine's load (2 cores shared with the fake and the store's server): say it
        print(
            f"20-symbol cycle, {args.repeats} runs, fake latency {args.latency_ms:g} ms/request, load average "
            f"{load_before:.2f} before and {os.getloadavg()[0]:.2f} after:"
        )
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
