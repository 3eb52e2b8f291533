"""Audit before action, proven by injecting the fault: the store's connections cut or a message lost
(a loopback TCP proxy in front of the embedded server), writers killed with SIGKILL mid-append, two
cycles of one session racing, and an old approval landing after a newer fill.

Each test asserts the exact guarantee: no fill without its events; no event lost after recovery;
no lost update; seq gap-free and count() equal to what is stored. The figures of docs/audit.md's "Faults survived"
table are counted here, never written down: events lost = events handed to a writer (counted at put(), or
acknowledged to a killed writer) that the log does not hold; fills without audit = ledger fills whose decision
is not in the log (or, at the instant of the fill, the cycle's events before EXECUTING not yet stored); lost
updates = committed fills the stored portfolio does not reflect (ledger against portfolio). Collected in FAULTS,
printed by `pytest -s tests/faults/test_store_faults.py`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from database import connect
from database.portfolio import PortfolioConflict
from graph.machine.builder import build_graph
from graph.machine.execution import PaperExecution
from graph.machine.nodes.common import EXECUTED_WITH_ERRORS
from graph.machine.nodes.executing import executing
from graph.machine.runner import ApprovalConflict, approve_cycle, run_state_machine
from schemas.portfolio import PortfolioSnapshot
from tests.fakes.tcp_proxy import FaultyProxy
from tests.helpers import services_with
from tests.killed_writers import writer_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# the BSON of an OP_MSG `{insert: "state_events"}`: what the proxy swallows to lose one audit insert
EVENTS_INSERT = b"\x02insert\x00\x0d\x00\x00\x00state_events\x00"


@pytest.fixture
def db_name() -> str:
    return f"fault_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def proxied(embedded_uri, db_name, tmp_path, monkeypatch):
    """(proxy, store through the proxy, store direct to the server), TRADEGRAPH_HOME in tmp."""
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    proxy = FaultyProxy(int(embedded_uri.rsplit(":", 1)[1]))
    through = connect(f"mongodb://127.0.0.1:{proxy.port}/{db_name}", timeout_s=1.0)
    direct = connect(f"{embedded_uri}/{db_name}")
    try:
        yield proxy, through, direct
    finally:
        proxy.close()
        through.close()
        direct.client.drop_database(db_name)
        direct.close()


def gap_free(store, session_id: str) -> bool:
    return [e["seq"] for e in store.events.read(session_id)] == list(range(1, store.events.count(session_id) + 1))


class Emitted:
    """Every audit event the code under test handed to a writer of these stores, counted as put() accepts it.
    Observes the writers the runner makes (Store.writer), changes nothing they do."""

    def __init__(self, *stores) -> None:
        self.events: list[tuple[str, str]] = []  # (session_id, event_id)
        for store in stores:
            self.watch(store)

    def watch(self, store):
        make = store.writer

        def writer(**options):
            w = make(**options)
            put = w.put

            def counted(event):
                put(event)
                self.events.append((event["session_id"], event["event_id"]))

            w.put = counted
            return w

        store.writer = writer
        return store

    def lost(self, store) -> int:
        """Emitted events the log does not hold (read after any recovery)."""
        stored = {(sid, e["event_id"]) for sid in {s for s, _ in self.events} for e in store.events.read(sid)}
        return len(set(self.events) - stored)


def fills_without_audit(store, session_id: str) -> int:
    """Fills in the execution ledger whose audit is not in the log: a fill needs its cycle's passed validation
    (recorded before it) and its ExecutionResult; an exit needs its cycle's SCANNING contract."""
    missing = 0
    for entry in store.executions.committed(session_id):
        cycle = entry["cycle_id"].removesuffix(":exits")
        contracts = {e["state"] for e in store.events.read(session_id, kind="contract", cycle_id=cycle)}
        need = {"SCANNING"} if entry["cycle_id"].endswith(":exits") else {"VALIDATING", "EXECUTING"}
        missing += not need <= contracts
    return missing


def lost_updates(store, session_id: str) -> int:
    """Committed fills the stored portfolio does not reflect (the ledger against the portfolio), each counted
    once: one the portfolio's commit history never saw, all but one of those committed from the same version
    (they overwrote each other), and the latest one if the stored portfolio is not its result."""
    committed = store.executions.committed(session_id)
    history = store.portfolios.state(session_id).get("history") or []
    lost = {e["cycle_id"] for e in committed if e["cycle_id"] not in history}
    by_base: dict = {}
    for e in committed:
        by_base.setdefault(e.get("base_version"), []).append(e["cycle_id"])
    lost |= {c for same in by_base.values() for c in same[:-1]}
    last = next((e for e in reversed(committed) if history and e["cycle_id"] == history[-1]), None)
    if last is not None and store.portfolios.load(session_id) != PortfolioSnapshot.model_validate(
        last["result"]["portfolio_after"]
    ):
        lost.add(last["cycle_id"])
    return len(lost)


def figures(emitted: Emitted, store, *sessions: str, injected: int = 1, **extra) -> dict:
    return dict(
        injected=injected,
        events_lost=emitted.lost(store),
        fills_without_audit=sum(fills_without_audit(store, s) for s in sessions),
        lost_updates=sum(lost_updates(store, s) for s in sessions),
        **extra,
    )


def test_store_cut_when_executing_starts_fails_closed_and_loses_no_event(proxied):
    proxy, store, direct = proxied
    emitted = Emitted(store)

    def cut_then_execute(state, config):
        proxy.cut()  # the store goes away at the worst moment: with the fill next
        return executing(state, config)

    graph = build_graph(overrides={"EXECUTING": cut_then_execute})
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), graph=graph)

    # fail closed before any fill, and say why: the store, by name, and where the events are
    assert out.status == "failed" and out.error["state"] == "EXECUTING"
    assert out.error["type"] == "AuditSpooled" and out.audit_error and "store recover" in out.audit_error
    assert "EXECUTING" not in out.contracts
    assert direct.executions.get(out.cycle_id) is None and direct.portfolios.load(out.session_id) is None
    before = direct.events.count(out.session_id)
    spooled = list((Path(os.environ["TRADEGRAPH_HOME"]) / "spool").glob("*.jsonl"))
    assert len(spooled) == 1
    in_spool = len(spooled[0].read_text().splitlines()) - 1  # after its header line

    waiting = emitted.lost(direct)  # the counter sees the spooled events missing from the store, until recovery
    proxy.restore()
    report = store.recover_spool()
    assert waiting == report.redelivered
    # part of the batch cut mid-insert may have landed: redelivery skips exactly those, stores the rest
    assert report.redelivered > 0 and report.redelivered + report.already_stored == in_spool and not report.skipped
    events = direct.events.read(out.session_id)
    assert len(events) == before + report.redelivered and gap_free(direct, out.session_id)
    assert len({e["event_id"] for e in events}) == len(events)
    assert direct.events.verify_chain(out.session_id)["ok"]
    # the whole story is on the record: the entry into EXECUTING, its error, the exit to END, how the cycle ended
    kinds = [(e["state"], e["kind"]) for e in events[-4:]]
    assert kinds == [
        ("EXECUTING", "transition"),
        ("EXECUTING", "error"),
        ("EXECUTING", "transition"),
        ("RUNNER", "cycle_ended"),
    ]
    assert events[-1]["payload"] == {"status": out.status} and out.status == "failed"
    assert sum(e["kind"] == "llm_request" for e in events) == sum(e["kind"] == "llm_response" for e in events) > 0
    assert not list(Path(os.environ["TRADEGRAPH_HOME"], "spool").glob("*.jsonl"))
    counted = figures(
        emitted,
        direct,
        out.session_id,
        spooled=in_spool,
        redelivered=report.redelivered,
        already_stored=report.already_stored,
    )
    assert (counted["events_lost"], counted["fills_without_audit"], counted["lost_updates"]) == (0, 0, 0), counted
    assert len(emitted.events) == len(events) > 0
    FAULTS["store cut at EXECUTING"] = counted


def test_a_lost_audit_insert_is_retried_and_stored_exactly_once(proxied):
    proxy, store, direct = proxied
    emitted = Emitted(store)
    proxy.drop_matching(EVENTS_INSERT, nth=1)
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    assert proxy.dropped == 1
    assert out.status == "completed" and out.audit_error is None
    assert out.contracts["EXECUTING"]["status"] == "filled"
    events = direct.events.read(out.session_id)
    assert len({e["event_id"] for e in events}) == len(events) == out.events and gap_free(direct, out.session_id)
    assert direct.events.verify_chain(out.session_id)["ok"]
    counted = figures(emitted, direct, out.session_id)
    assert (counted["events_lost"], counted["fills_without_audit"], counted["lost_updates"]) == (0, 0, 0), counted
    assert len(emitted.events) == len(events) and direct.executions.get(out.cycle_id) is not None
    FAULTS["audit insert lost on the wire"] = counted


class SlowAuditLink(FaultyProxy):
    """The proxy, holding every `state_events` insert for `delay` seconds before passing it on (a slow or
    congested store): a fill that does not wait for the cycle's events always overtakes them."""

    delay = 0.4

    def _should_drop(self, message: bytes) -> bool:
        if EVENTS_INSERT in message:
            time.sleep(self.delay)
        return super()._should_drop(message)


class FillWatch(PaperExecution):
    """The paper broker, noting which events of the session are stored at the instant it records the fill."""

    def __init__(self, store, config, direct) -> None:
        super().__init__(store, config)
        self.direct, self.stored_at_fill = direct, None

    def record(self, cycle_id, session_id, result, *, base_version=None):
        self.stored_at_fill = {e["event_id"] for e in self.direct.events.read(session_id)}
        return super().record(cycle_id, session_id, result, base_version=base_version)


def test_a_fill_is_preceded_by_its_durable_events(embedded_uri, db_name, tmp_path, monkeypatch):
    """Audit before action, against a slow store: at the instant of the fill, every event of the cycle up to
    EXECUTING's entry is stored. Without the barrier (graph/machine/nodes/executing.py audit_barrier) the fill lands
    while they are still on the wire, every time."""
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    link = SlowAuditLink(int(embedded_uri.rsplit(":", 1)[1]))
    store = connect(f"mongodb://127.0.0.1:{link.port}/{db_name}")
    direct = connect(f"{embedded_uri}/{db_name}")
    try:
        emitted = Emitted(store)
        rt = services_with()
        rt.execution = watch = FillWatch(store, rt.config, direct)
        out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=rt)
        assert out.contracts["EXECUTING"]["status"] == "filled" and watch.stored_at_fill is not None
        events = direct.events.read(out.session_id)
        entered = next(e["seq"] for e in events if e["state"] == "EXECUTING")  # its entry transition
        before = {e["event_id"] for e in events if e["seq"] <= entered}
        not_stored_at_fill = len(before - watch.stored_at_fill)
        counted = figures(emitted, direct, out.session_id, not_stored_at_fill=not_stored_at_fill)
        counted["fills_without_audit"] += int(not_stored_at_fill > 0)
        assert not_stored_at_fill == 0, f"{not_stored_at_fill} of {len(before)} events before EXECUTING not stored"
        assert (counted["events_lost"], counted["fills_without_audit"], counted["lost_updates"]) == (0, 0, 0), counted
        FAULTS["fill against a slow store"] = counted
    finally:
        link.close()
        store.close()
        direct.client.drop_database(db_name)
        direct.close()


KILL_SCRIPT = """
import sys, uuid, time
from database import connect
s = connect(sys.argv[1])
print("ready", flush=True)
n = 0
while True:
    batch = [{"event_id": uuid.uuid4().hex, "session_id": "K", "cycle_id": "K:c1", "ts": time.time(),
              "state": "RUNNER", "kind": "transition", "payload": {"n": n + i, "pad": "x" * 300}}
             for i in range(1 + n % 7)]
    s.events.append(batch)
    print(" ".join(e["event_id"] for e in batch), flush=True)  # acknowledged: these must never be lost
    n += 1
"""


def test_writers_killed_mid_append_leave_no_gap(embedded_uri, db_name, tmp_path):
    uri = f"{embedded_uri}/{db_name}"
    rng = random.Random(7)
    kills = 20
    acked: set[str] = set()
    # each writer a process of its own, SIGKILLed; forked from one server that imported the store and the event
    # models (what a first append loads) once, so each writer is appending within the kill window
    with writer_server(
        KILL_SCRIPT, [uri], tmp_path / "writers", preload="from database import connect; import schemas.events"
    ) as writers:
        for _ in range(kills):
            writer = writers.start()
            time.sleep(rng.uniform(0.05, 0.4))
            # a torn last line is a batch whose acknowledgement was never fully reported: not counted as acked
            acked.update(i for line in writer.kill() for i in line.split())
    store = connect(uri)
    try:
        stored_ids = {e["event_id"] for e in store.events.read("K")}
        stored = store.db["state_events"].count_documents({"session_id": "K"})
        last_seq = store.events.count("K")
        assert len(acked) > kills  # the writers did get events in
        assert store.events.count("K") == stored and gap_free(store, "K")
        chain = store.events.verify_chain("K")
        assert (chain["ok"], chain["checked"], chain["first_broken"]) == (True, stored, None), chain
        lost = len(acked - stored_ids)
        assert lost == 0 and stored - len(acked) <= kills * 7  # at most each killed writer's unanswered batch
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["writer SIGKILLed mid-append"] = dict(
        injected=kills,
        events_lost=lost,
        fills_without_audit=None,
        lost_updates=None,
        acknowledged=len(acked),
        stored=stored,
        seq_gaps=last_seq - stored,
        after_head=chain["after_head"],
    )


def test_two_cycles_of_one_session_at_once_one_wins_none_lost(embedded_uri, db_name, tg_home):
    store = connect(f"{embedded_uri}/{db_name}")
    emitted = Emitted(store)
    try:
        first = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
        sid = first.session_id
        # sell everything so both racers see a flat book and both want to buy
        start = store.portfolios.load(sid).model_copy(update={"positions": {}, "cash": 100_000.0})
        store.portfolios.save(sid, start, "reset")
        gate = threading.Barrier(2)

        def racing_execute(state, config):
            gate.wait(timeout=60)  # both cycles read the same portfolio and reach EXECUTING together
            return executing(state, config)

        graph = build_graph(overrides={"EXECUTING": racing_execute})
        outs: list = [None, None]

        def run(i):
            outs[i] = run_state_machine(
                "AAPL,MSFT",
                "2012-06-01",
                store=emitted.watch(connect(f"{embedded_uri}/{db_name}")),
                session_id=sid,
                services=services_with(),
                graph=graph,
            )

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        statuses = sorted(o.status for o in outs)
        assert statuses == ["completed", "failed"], statuses
        winner = next(o for o in outs if o.status == "completed")
        loser = next(o for o in outs if o.status == "failed")
        assert winner.contracts["EXECUTING"]["status"] == "filled"
        assert loser.error["type"] == "PortfolioConflict" and "nothing filled" in loser.error["message"]
        # no lost update: the stored portfolio is exactly the winner's, and only its fill is in the ledger
        assert store.portfolios.load(sid).model_dump() == winner.contracts["EXECUTING"]["portfolio_after"]
        assert store.executions.get(loser.cycle_id) is None and store.executions.get(winner.cycle_id) is not None
        counted = figures(emitted, store, sid)
        assert (counted["events_lost"], counted["fills_without_audit"], counted["lost_updates"]) == (0, 0, 0), counted
        assert len(store.executions.committed(sid)) == 2  # the first cycle's fill and the winner's
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["two cycles of one session at once"] = counted


def test_an_old_approval_after_a_newer_fill_is_refused(embedded_uri, db_name, tg_home):
    store = connect(f"{embedded_uri}/{db_name}")
    emitted = Emitted(store)
    try:
        paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), approve=True)
        assert paused.status == "pending_approval"
        sid = paused.session_id
        newer = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, session_id=sid, services=services_with())
        assert newer.contracts["EXECUTING"]["status"] == "filled"
        after_newer = store.portfolios.load(sid)
        with pytest.raises(ApprovalConflict, match="moved on"):
            approve_cycle(sid, store=store, approved=True, by="alice", services=services_with())
        assert store.portfolios.load(sid) == after_newer and store.executions.get(paused.cycle_id) is None
        refusals = [
            e
            for e in store.events.read(sid, kind="validation")
            if e["payload"].get("check") == "approval_refused_stale"
        ]
        assert len(refusals) == 1 and refusals[0]["cycle_id"] == paused.cycle_id
        # rejecting it is still possible, and closes it without a fill
        rejected = approve_cycle(sid, store=store, approved=False, by="alice", services=services_with())
        assert rejected.status == "rejected" and store.portfolios.load(sid) == after_newer
        counted = figures(emitted, store, sid)
        assert (counted["events_lost"], counted["fills_without_audit"], counted["lost_updates"]) == (0, 0, 0), counted
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["old approval after a newer fill"] = counted


def test_a_failure_after_the_fill_never_reads_as_nothing_executed(embedded_uri, db_name, tg_home):
    from graph.transports.cli.main import EXIT_EXECUTED_WITH_ERRORS, cycle_exit_code

    store = connect(f"{embedded_uri}/{db_name}")
    emitted = Emitted(store)
    try:
        bad_memory = services_with({"AgentMemory": ["not json"] * 3})
        out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=bad_memory)
        assert out.contracts["EXECUTING"]["status"] == "filled"
        assert out.status == EXECUTED_WITH_ERRORS and out.error["state"] == "MEMORIZING"
        assert cycle_exit_code(out.status) == EXIT_EXECUTED_WITH_ERRORS
        assert store.executions.get(out.cycle_id) is not None
        counted = figures(emitted, store, out.session_id)
        assert (counted["events_lost"], counted["fills_without_audit"], counted["lost_updates"]) == (0, 0, 0), counted
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["a failure after the fill"] = counted


def test_a_fill_cut_between_ledger_and_portfolio_is_completed_on_restart(embedded_uri, db_name, tg_home):
    """The outbox: a process killed after writing the pending ledger entry, before moving the portfolio."""
    script = f"""
import os, signal, sys
from database import connect
from database import portfolio as p
from schemas.portfolio import PortfolioSnapshot
s = connect({f"{embedded_uri}/{db_name}"!r})
real_commit = p.PortfolioStore.commit
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)  # the instant between the two writes
p.PortfolioStore.commit = die
after = PortfolioSnapshot(cash=50.0).model_dump(mode="json")
p.commit_fill(s.portfolios, s.executions, "S:c1", "S", {{"portfolio_after": after, "status": "filled"}}, 0)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -signal.SIGKILL
    store = connect(f"{embedded_uri}/{db_name}")
    try:
        assert store.executions.entry("S:c1")["state"] == "pending" and store.portfolios.load("S") is None
        from database.portfolio import complete_pending

        assert complete_pending(store.portfolios, store.executions) == {"committed": 1, "aborted": 0}
        assert store.portfolios.load("S").cash == 50.0 and store.executions.entry("S:c1")["state"] == "committed"
        # and a pending entry whose portfolio moved on meanwhile is aborted, never applied over it
        store.executions.record("S:c2", "S", {"portfolio_after": {"cash": 1.0}}, state="pending", base_version=0)
        assert complete_pending(store.portfolios, store.executions) == {"committed": 0, "aborted": 1}
        assert store.portfolios.load("S").cash == 50.0 and store.executions.get("S:c2") is None
        with pytest.raises(PortfolioConflict):
            from database.portfolio import commit_fill

            commit_fill(store.portfolios, store.executions, "S:c3", "S", {"portfolio_after": {"cash": 2.0}}, 0)
        # no events here (the fill is written directly): only the ledger against the portfolio is counted
        lost = lost_updates(store, "S")
        assert lost == 0 and [e["cycle_id"] for e in store.executions.committed("S")] == ["S:c1"]
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["process killed between ledger and portfolio"] = dict(
        injected=1, events_lost=None, fills_without_audit=None, lost_updates=lost
    )


FAULTS: dict[str, dict] = {}


def teardown_module(module) -> None:
    if FAULTS:
        print("\nFaults survived (this run; — = not applicable to this fault):")
        for name, counted in FAULTS.items():
            print(f"  {name}: " + ", ".join(f"{k}={'—' if v is None else v}" for k, v in counted.items()))
