"""`tradegraph replay --verify` re-executes from the recording alone, in a process that never saw the
cycle: a rejected approval, a cycle still waiting for one, and a user's price file deleted after the run
all verify identical on the embedded store; a tampered event fails verify and --check-chain (in process: the
chain is read from the store whoever reads it)."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import pytest

from agent.data.market import VENDORED_CSV, load_market_data
from database.connection import connect
from graph.machine.runner import run_state_machine
from tests.helpers import services_with
from tests.integration.test_cli import tg

pytestmark = pytest.mark.integration


def _events(tradegraph, sid, home, db=()):
    """A session's events read back (in process: what is checked is the log, not the reading process)."""
    return [json.loads(line) for line in tradegraph("events", sid, *db, TRADEGRAPH_HOME=str(home)).stdout.splitlines()]


def test_verify_a_rejected_approval_in_another_process(tmp_path, tradegraph):
    """The rejection and the verify are each a process of their own; the run and the read-backs run in process."""
    home = {"TRADEGRAPH_HOME": str(tmp_path)}
    run = tradegraph("run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--json", **home)
    assert run.returncode == 0, run.stderr
    sid = json.loads(run.stdout)["session_id"]
    paused = tradegraph("replay", sid, "--verify", **home)  # before anyone decided: the replay pauses too
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert "waiting for human approval" in paused.stdout and "IDENTICAL" in paused.stdout
    rej = tg(["approve", sid, "--reject", "--by", "bob", "--json"], tmp_path)
    assert rej.returncode == 0 and json.loads(rej.stdout)["status"] == "rejected", rej.stderr

    r = tg(["replay", sid, "--verify"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay identical to the recording" in r.stdout and "DIVERGED" not in r.stdout
    replay = _events(tradegraph, f"replay-{sid}-2", tmp_path)
    # the replay followed bob's recorded decision: no transition into EXECUTING, no fill, no error
    assert not [e for e in replay if e["kind"] == "transition" and e["payload"]["to"] == "EXECUTING"]
    assert not [e for e in replay if e["kind"] == "error"]
    assert [e["payload"]["by"] for e in replay if e["kind"] == "approval_decided"] == ["bob"]
    assert tradegraph("replay", sid, "--check-chain", **home).returncode == 0


def test_verify_after_the_users_price_file_is_deleted(embedded_uri, tmp_path, tradegraph):
    rows = gzip.decompress(Path(VENDORED_CSV).read_bytes()).decode().splitlines()
    mine = tmp_path / "my_prices.csv"
    mine.write_text("\n".join([rows[0]] + ["QQQX" + r[4:] for r in rows[1:] if r.startswith("AAPL,")]) + "\n")
    db = f"{embedded_uri}/replay_{uuid.uuid4().hex[:8]}"
    store = connect(db)
    rt = services_with()
    rt.market = load_market_data(mine)
    try:
        out = run_state_machine("QQQX", "2012-06-01", store=store, services=rt)
    finally:
        store.close()
    assert out.status == "completed" and "EXECUTING" in out.contracts
    mine.unlink()

    r = tg(["replay", out.session_id, "--verify", "--db", db], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay identical to the recording" in r.stdout
    # the difference is reported, not hidden: the recorded file is gone, today's data is the bundled set
    assert "data source market.source: recorded" in r.stdout and "my_prices.csv" in r.stdout
    executed = [
        e
        for e in _events(tradegraph, f"replay-{out.session_id}-1", tmp_path, ("--db", db))
        if e["kind"] == "contract" and e["state"] == "EXECUTING"
    ]
    assert executed[0]["payload"]["data"] == out.contracts["EXECUTING"]


def test_a_tampered_event_fails_verify_and_check_chain(embedded_uri, tradegraph):
    db = f"{embedded_uri}/tamper_{uuid.uuid4().hex[:8]}"
    store = connect(db)
    try:
        out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
        # an edit that changes no contract: only the chain can tell
        store.db["state_events"].update_one(
            {"session_id": out.session_id, "seq": 5}, {"$set": {"payload.edited": True}}
        )
    finally:
        store.close()
    chain = tradegraph("replay", out.session_id, "--check-chain", "--db", db)
    assert chain.returncode == 1 and chain.stderr.count("\n") == 1 and "broken at seq 5" in chain.stderr
    r = tradegraph("replay", out.session_id, "--verify", "--db", db)
    assert r.returncode == 1 and "hash chain broken at seq 5" in r.stdout and "not verified" in r.stdout
