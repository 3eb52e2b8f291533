"""A killed approver (issue 28, hole 1), the fault injected for real: `tradegraph approve SID --by alice` runs as its
own process through a loopback proxy that holds the portfolio's commit (the store stalls after the execution ledger
took the fill `pending`), and is SIGKILLed there. Then `approve SID --reject --by bob` must be refused (exit 2, one
line naming alice's started fill), and `store recover` finishes alice's approval: the book and the record then
agree (the portfolio is the ledger's fill; the cycle, its approval claim, the summary and the replay say completed
and approved by alice; no event says rejected)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from database import connect
from graph.machine.recording import load_session_log
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from schemas.portfolio import PortfolioSnapshot
from tests.fakes.tcp_proxy import FaultyProxy
from tests.helpers import services_with

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# the BSON of an OP_MSG `{insert: "portfolios"}`: a session's first fill inserts its portfolio (version 0 -> 1)
PORTFOLIO_INSERT = b"\x02insert\x00\x0b\x00\x00\x00portfolios\x00"


def test_a_killed_approvers_started_fill_is_finished_and_an_opposite_decision_refused(
    embedded_uri, tg_home, tmp_path, capsys
):
    name = f"killed_{uuid.uuid4().hex[:10]}"
    direct = f"{embedded_uri}/{name}"
    proxy = FaultyProxy(int(embedded_uri.rsplit(":", 1)[1]))
    store = connect(direct)
    try:
        paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), approve=True)
        sid, cycle = paused.session_id, paused.cycle_id
        assert paused.status == "pending_approval" and paused.contracts["VALIDATING"]["passed"]

        proxy.hold_matching(PORTFOLIO_INSERT)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRADEGRAPH_LLM": "offline",
            "MONGODB_URI": f"mongodb://127.0.0.1:{proxy.port}/{name}",
            "TRADEGRAPH_HOME": str(tg_home),
        }
        alice = subprocess.Popen(
            [sys.executable, "-m", "graph.transports.cli.main", "approve", sid, "--by", "alice"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proxy.held.wait(120), "alice's approval never reached the portfolio's commit"
            assert store.executions.entry(cycle)["state"] == "pending" and store.portfolios.load(sid) is None
            alice.send_signal(signal.SIGKILL)
            assert alice.wait(30) == -signal.SIGKILL
        finally:
            if alice.poll() is None:
                alice.kill()
                alice.wait()
            proxy.release()
        capsys.readouterr()

        # bob's opposite decision would take over the dead claim: refused, naming alice's started fill
        assert main(["approve", sid, "--reject", "--by", "bob", "--db", direct]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "fill was started by the approval by alice" in err, err
        assert "store recover" in err and store.portfolios.load(sid) is None

        assert main(["store", "recover", "--db", direct]) == 0
        out = capsys.readouterr().out
        assert f"cycle {cycle}: its approver stopped after its fill was started" in out and "ended completed" in out

        # the book: the ledger's fill, committed once
        entry = store.executions.entry(cycle)
        assert entry["state"] == "committed" and len(store.executions.committed(sid)) == 1
        book = store.portfolios.load(sid)
        assert book == PortfolioSnapshot.model_validate(entry["result"]["portfolio_after"]) and book.positions
        # the record: the claim, the log's approvals and status, the summary, the replay
        claim = store.db["approvals"].find_one({"_id": cycle})
        assert (claim["state"], claim["approved"], claim["by"], claim["status"]) == (
            "decided",
            True,
            "alice",
            "completed",
        )
        assert claim["finished_by"] == "store recover"
        events = store.events.read(sid, cycle_id=cycle)
        approvals = [e["payload"] for e in events if e["kind"] == "approval_decided"]
        assert approvals and all(a["approved"] and a["by"] == "alice" for a in approvals), approvals
        refused = [e["payload"] for e in events if e["payload"].get("check") == "approval_refused_fill_started"]
        assert [r["by"] for r in refused] == ["bob"]
        ended = [e["payload"]["status"] for e in events if e["kind"] == "cycle_ended"]
        assert ended == ["completed"]
        assert store.sessions.get(sid)["status"] == "completed"
        replayed = load_session_log(store, sid, check_chain=True)
        assert replayed.cycles[-1].status == "completed" and replayed.chain["ok"], replayed.chain
        assert replayed.cycles[-1].approval == {"approved": True, "by": "alice"}
        # nothing is left to decide: a late rejection is told the cycle is done, by whom
        assert main(["approve", sid, "--reject", "--by", "bob", "--db", direct]) == 2
        late = capsys.readouterr().err
        assert "no cycle waiting for approval" in late and "approved by alice" in late, late
    finally:
        proxy.close()
        store.client.drop_database(name)
        store.close()
