"""Audit before action, proven by injecting the fault: the store's connections cut or a message lost
(a loopback TCP proxy in front of the embedded server), writers killed with SIGKILL mid-append, two
cycles of one session racing, and an old approval landing after a newer fill.

Each test asserts the exact guarantee: no fill without its events; no event lost after recovery;
no lost update; seq gap-free and count() equal to what is stored. The figures each test measures are
collected in FAULTS (printed by `pytest -s tests/faults`, quoted in the README's "Faults survived").
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
from graph.builder import build_graph
from graph.nodes.common import EXECUTED_WITH_ERRORS
from graph.nodes.executing import executing
from graph.runner import ApprovalConflict, approve_cycle, run_cycle
from tests.fakes.tcp_proxy import FaultyProxy
from tests.helpers import runtime_with

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


def test_store_cut_when_executing_starts_fails_closed_and_loses_no_event(proxied):
    proxy, store, direct = proxied

    def cut_then_execute(state, config):
        proxy.cut()  # the store goes away at the worst moment: with the fill next
        return executing(state, config)

    graph = build_graph(overrides={"EXECUTING": cut_then_execute})
    out = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with(), graph=graph)

    # fail closed before any fill, and say why: the store, by name, and where the events are
    assert out.status == "failed" and out.error["state"] == "EXECUTING"
    assert out.error["type"] == "AuditSpooled" and out.audit_error and "store recover" in out.audit_error
    assert "EXECUTING" not in out.contracts
    assert direct.executions.get(out.cycle_id) is None and direct.portfolios.load(out.session_id) is None
    before = direct.events.count(out.session_id)
    spooled = list((Path(os.environ["TRADEGRAPH_HOME"]) / "spool").glob("*.jsonl"))
    assert len(spooled) == 1
    in_spool = len(spooled[0].read_text().splitlines()) - 1  # after its header line

    proxy.restore()
    report = store.recover_spool()
    # part of the batch cut mid-insert may have landed: redelivery skips exactly those, stores the rest
    assert report.redelivered > 0 and report.redelivered + report.already_stored == in_spool and not report.skipped
    events = direct.events.read(out.session_id)
    assert len(events) == before + report.redelivered and gap_free(direct, out.session_id)
    assert len({e["event_id"] for e in events}) == len(events)
    assert direct.events.verify_chain(out.session_id)["ok"]
    # the whole story is on the record: the entry into EXECUTING, its error, the exit to END
    kinds = [(e["state"], e["kind"]) for e in events[-3:]]
    assert kinds == [("EXECUTING", "transition"), ("EXECUTING", "error"), ("EXECUTING", "transition")]
    assert sum(e["kind"] == "llm_request" for e in events) == sum(e["kind"] == "llm_response" for e in events) > 0
    assert not list(Path(os.environ["TRADEGRAPH_HOME"], "spool").glob("*.jsonl"))
    FAULTS["store cut at EXECUTING"] = dict(
        injected=1, spooled=in_spool, redelivered=report.redelivered, already_stored=report.already_stored,
        events_lost=in_spool - report.redelivered - report.already_stored,
        fills_without_audit=int(direct.executions.get(out.cycle_id) is not None), lost_updates=0)


def test_a_lost_audit_insert_is_retried_and_stored_exactly_once(proxied):
    proxy, store, direct = proxied
    proxy.drop_matching(EVENTS_INSERT, nth=1)
    out = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with())
    assert proxy.dropped == 1
    assert out.status == "completed" and out.audit_error is None
    assert out.contracts["EXECUTING"]["status"] == "filled"
    events = direct.events.read(out.session_id)
    assert len({e["event_id"] for e in events}) == len(events) == out.events and gap_free(direct, out.session_id)
    assert direct.events.verify_chain(out.session_id)["ok"]
    FAULTS["audit insert lost on the wire"] = dict(injected=1, events_lost=0, fills_without_audit=0, lost_updates=0)


def test_a_fill_is_preceded_by_its_durable_events(proxied):
    """No batching fault: EXECUTING still waits until the cycle's events so far are in the store."""
    proxy, store, direct = proxied
    seen: dict[str, int] = {}

    def observe_then_execute(state, config):
        out = executing(state, config)
        seen["stored_at_fill"] = direct.events.count(state["session_id"])
        return out

    graph = build_graph(overrides={"EXECUTING": observe_then_execute})
    out = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with(), graph=graph)
    assert out.contracts["EXECUTING"]["status"] == "filled"
    decided = [e for e in direct.events.read(out.session_id) if e["state"] == "VALIDATING"]
    last_before_fill = max(e["seq"] for e in decided)
    assert seen["stored_at_fill"] > last_before_fill


KILL_SCRIPT = """
import sys, uuid, time
from database import connect
s = connect(sys.argv[1])
print("ready", flush=True)
n = 0
while True:
    s.events.append([{"event_id": uuid.uuid4().hex, "session_id": "K", "cycle_id": "K:c1", "ts": time.time(),
                      "state": "RUNNER", "kind": "transition", "payload": {"n": n + i, "pad": "x" * 300}}
                     for i in range(1 + n % 7)])
    n += 1
"""


def test_writers_killed_mid_append_leave_no_gap(embedded_uri, db_name):
    uri = f"{embedded_uri}/{db_name}"
    rng = random.Random(7)
    kills = 20
    for _ in range(kills):
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, uri], cwd=ROOT, stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = connect(uri)
    try:
        stored = store.db["state_events"].count_documents({"session_id": "K"})
        last_seq = store.events.count("K")
        assert stored > kills  # the writers did get events in
        assert store.events.count("K") == stored and gap_free(store, "K")
        assert store.events.verify_chain("K") == {"ok": True, "checked": stored, "first_broken": None}
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["writer SIGKILLed mid-append"] = dict(injected=kills, seq_gaps=last_seq - stored)


def test_two_cycles_of_one_session_at_once_one_wins_none_lost(embedded_uri, db_name, tg_home):
    store = connect(f"{embedded_uri}/{db_name}")
    try:
        first = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with())
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
            outs[i] = run_cycle("AAPL,MSFT", "2012-06-01", store=connect(f"{embedded_uri}/{db_name}"),
                                session_id=sid, runtime=runtime_with(), graph=graph)

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
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["two cycles of one session at once"] = dict(injected=1, events_lost=0, fills_without_audit=0,
                                                       lost_updates=0)


def test_an_old_approval_after_a_newer_fill_is_refused(embedded_uri, db_name, tg_home):
    store = connect(f"{embedded_uri}/{db_name}")
    try:
        paused = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with(), approve=True)
        assert paused.status == "pending_approval"
        sid = paused.session_id
        newer = run_cycle("AAPL,MSFT", "2012-06-01", store=store, session_id=sid, runtime=runtime_with())
        assert newer.contracts["EXECUTING"]["status"] == "filled"
        after_newer = store.portfolios.load(sid)
        with pytest.raises(ApprovalConflict, match="moved on"):
            approve_cycle(sid, store=store, approved=True, by="alice", runtime=runtime_with())
        assert store.portfolios.load(sid) == after_newer and store.executions.get(paused.cycle_id) is None
        refusals = [e for e in store.events.read(sid, kind="validation")
                    if e["payload"].get("check") == "approval_refused_stale"]
        assert len(refusals) == 1 and refusals[0]["cycle_id"] == paused.cycle_id
        # rejecting it is still possible, and closes it without a fill
        rejected = approve_cycle(sid, store=store, approved=False, by="alice", runtime=runtime_with())
        assert rejected.status == "rejected" and store.portfolios.load(sid) == after_newer
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["old approval after a newer fill"] = dict(injected=1, events_lost=0, fills_without_audit=0, lost_updates=0)


def test_a_failure_after_the_fill_never_reads_as_nothing_executed(embedded_uri, db_name, tg_home):
    from graph.kernel.transports.cli.main import EXIT_EXECUTED_WITH_ERRORS, cycle_exit_code

    store = connect(f"{embedded_uri}/{db_name}")
    try:
        bad_memory = runtime_with({"AgentMemory": ["not json"] * 3})
        out = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=bad_memory)
        assert out.contracts["EXECUTING"]["status"] == "filled"
        assert out.status == EXECUTED_WITH_ERRORS and out.error["state"] == "MEMORIZING"
        assert cycle_exit_code(out.status) == EXIT_EXECUTED_WITH_ERRORS
        assert store.executions.get(out.cycle_id) is not None
    finally:
        store.client.drop_database(db_name)
        store.close()


def test_a_fill_cut_between_ledger_and_portfolio_is_completed_on_restart(embedded_uri, db_name, tg_home):
    """The outbox: a process killed after writing the pending ledger entry, before moving the portfolio."""
    script = f"""
import os, signal, sys
from database import connect
from database import portfolio as p
from schemas.portfolio import PortfolioSnapshot
s = connect({f'{embedded_uri}/{db_name}'!r})
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
    finally:
        store.client.drop_database(db_name)
        store.close()
    FAULTS["process killed between ledger and portfolio"] = dict(injected=1, events_lost=0, fills_without_audit=0,
                                                                 lost_updates=0)


FAULTS: dict[str, dict] = {}


def teardown_module(module) -> None:
    if FAULTS:
        print("\nFaults survived (this run):")
        for name, figures in FAULTS.items():
            print(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
