"""Broker cycles across real processes on the embedded store, against the fake Alpaca in this process: an
approver SIGKILLed between its submit and the broker's answer, two approvers racing, a halt raised by another
process in the middle of a cycle. Each ends with exactly one order per leg at the broker and a clean reconcile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from tests.brokers.harness import start_fake
from tests.fakes.fake_alpaca import KEY, SECRET
from tests.integration.test_cli import ROOT, tg

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RUN = ["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--broker", "alpaca", "--json"]


@pytest.fixture
def fake(tmp_path, embedded_uri):
    fake = start_fake()
    # one store server for every process of the test (the session's embedded one, a database of the test's own):
    # a CLI process that started the embedded server would stop it under the others when it exits
    fake.db_uri = f"{embedded_uri}/broker_{uuid.uuid4().hex[:8]}"
    fake.positions.clear()  # the account holds what these sessions bought, nothing else
    (tmp_path / "mandate.toml").write_text(
        'trading_hours = "00:00-23:59"\nmax_order_notional = 1e9\n'
        "max_position_notional = 1e9\nmax_gross_exposure = 1e9\n"
    )
    yield fake
    fake.stop()
    assert fake.peers <= {"127.0.0.1"}


def env_of(fake, tmp_path) -> dict[str, str]:
    return {
        "MONGODB_URI": fake.db_uri,
        "ALPACA_API_KEY": KEY,
        "ALPACA_SECRET_KEY": SECRET,
        "ALPACA_BASE_URL": fake.url,
        "TRADEGRAPH_MANDATE": str(tmp_path / "mandate.toml"),
        "TRADEGRAPH_BROKER_FILL_WAIT_S": "0.5",
    }


def cli(fake, tmp_path, *args):
    """A CLI step as a process of its own: the approvers, and the halt raised while one of them is mid-cycle."""
    return tg(list(args), tmp_path, env_extra=env_of(fake, tmp_path))


@pytest.fixture
def here(fake, tmp_path, tradegraph):
    """A CLI step whose own process is not what the test checks (the cycle that pauses, the read-backs, the
    reconcile): main(argv) in this process, against the same store, broker and home."""
    env = {"TRADEGRAPH_HOME": str(tmp_path), **env_of(fake, tmp_path)}
    return lambda *args: tradegraph(*args, **env)


def popen(fake, tmp_path, *args) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "OPENAI_API_KEY", "TRADEGRAPH_LLM")}
    env.update({"TRADEGRAPH_HOME": str(tmp_path), "PYTHONPATH": ROOT, **env_of(fake, tmp_path)})
    return subprocess.Popen(
        [sys.executable, "-m", "graph.transports.cli.main", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def events(here, sid):
    out = here("events", sid)
    return [json.loads(line) for line in out.stdout.splitlines()]


def paused(here) -> str:
    run = here(*RUN)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["status"] == "pending_approval"  # the mandate's default: every broker cycle waits for a person
    return out["session_id"]


def one_per_leg(fake, evs) -> None:
    cids = {e["payload"]["client_order_id"] for e in evs if e["kind"] == "order_intent"}
    assert cids and all(len(fake.accepted(c)) == 1 for c in cids), fake.posts
    assert len(fake.orders) == len(cids)


def test_approver_killed_between_submit_and_answer_restarted_sends_no_second_order(fake, tmp_path, here):
    sid = paused(here)
    proc: dict[str, subprocess.Popen] = {}
    first = threading.Event()

    def kill_at_first_post(cid: str) -> None:
        if not first.is_set():
            first.set()
            os.kill(proc["p"].pid, signal.SIGKILL)  # the order is taken below; its answer goes to a dead process

    fake.on_post = kill_at_first_post
    proc["p"] = popen(fake, tmp_path, "approve", sid, "--by", "alice", "--json")
    assert proc["p"].wait(timeout=120) == -signal.SIGKILL
    assert len(fake.orders) == 1
    fake.on_post = None
    again = cli(fake, tmp_path, "approve", sid, "--by", "alice", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "completed"
    evs = events(here, sid)
    one_per_leg(fake, evs)
    acks = [e["payload"] for e in evs if e["kind"] == "order_ack"]
    assert sorted(a["found_existing"] for a in acks) == [False, True]
    assert all(
        e["payload"]["resumed"]
        for e in evs
        if e["kind"] == "order_intent" and e["seq"] > min(x["seq"] for x in evs if x["kind"] == "order_intent") + 1
    )
    rec = here("broker", "reconcile", sid, "--json")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert json.loads(rec.stdout)["clean"] is True


def test_two_processes_approving_place_each_order_once(fake, tmp_path, here):
    sid = paused(here)
    procs = [popen(fake, tmp_path, "approve", sid, "--by", who) for who in ("alice", "bob")]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 2], [p.stderr.read() for p in procs]
    one_per_leg(fake, events(here, sid))
    assert here("broker", "reconcile", sid).returncode == 0


def test_halt_from_another_process_mid_cycle(fake, tmp_path, here):
    sid = paused(here)
    halted = threading.Event()

    def halt_at_first_post(cid: str) -> None:
        if not halted.is_set():
            halted.set()
            h = cli(fake, tmp_path, "broker", "halt", "--by", "ops", "--reason", "test")
            assert h.returncode == 0, h.stderr

    fake.on_post = halt_at_first_post
    ok = cli(fake, tmp_path, "approve", sid, "--by", "alice", "--json")
    fake.on_post = None
    out = json.loads(ok.stdout)
    assert ok.returncode == 4 and out["status"] == "executed_with_errors", ok.stderr  # one filled, one never sent
    rows = out["contracts"]["EXECUTING"]["result"]["orders"]
    assert [r["status"] for r in rows].count("filled") == 1
    assert [r["status"] for r in rows].count("not_submitted") == 1 and "halted by ops" in str(rows)
    assert len(fake.orders) == 1
    # a cycle approved while halted is refused, audited, and stays paused
    run = here(*RUN[:-1], "--session", sid, "--as-of", "2012-06-04", "--json")
    assert run.returncode == 0, run.stderr
    refused = here("approve", sid, "--by", "alice")
    assert refused.returncode == 2 and "halted" in refused.stderr
    assert len(fake.orders) == 1
    evs = events(here, sid)
    assert any(e["payload"].get("check") == "approval_refused_halted" for e in evs)
    control = events(here, "broker-control")
    assert [e["payload"]["action"] for e in control] == ["halt"] and control[0]["payload"]["by"] == "ops"
    assert here("broker", "resume", "--by", "ops").returncode == 0
    rec = here("broker", "reconcile", sid, "--json")
    assert rec.returncode == 0 and json.loads(rec.stdout)["clean"], rec.stdout
