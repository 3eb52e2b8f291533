"""Deleting what is still running or waiting (issue 28, holes 4 and 5), each fault injected for real:
- a cycle in flight (held in a slow model's call, its session quiet for longer than the 60 s head rule, as after a
  long model call) is refused by `sessions delete` (exit 2, naming the cycle) and kept by `prune`; a forced deletion
  fences it: the cycle, released, writes nothing more into the deleted session (no event, no head, no portfolio) and
  stops, and `replay --check-chain` names the deletion instead of reading a log broken at seq 1;
- a cycle paused at pending_approval is kept by `sessions prune` (its approval then still works) unless --force;
- a cycle fenced at the instant of its fill leaves no book and no ledger entry behind."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC

import pytest

from agent.config import AgentConfig
from database import connect, running
from graph.machine.cycle_context import default_services
from graph.machine.execution import PaperExecution
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from schemas.portfolio import PortfolioSnapshot
from tests.fakes.gated_model import GatedModel

pytestmark = pytest.mark.integration


@pytest.fixture
def db(embedded_uri):
    name = f"guards_{uuid.uuid4().hex[:8]}"
    yield f"{embedded_uri}/{name}"
    with connect(f"{embedded_uri}/{name}") as store:
        store.client.drop_database(name)


def quiet_for(store, sid: str, seconds: float) -> None:
    """Age the session's last write as the store records it (its head and its summary), as a model call that long
    would have left them."""
    head = store.events.heads.get(sid)
    from datetime import datetime, timedelta

    then = (datetime.fromisoformat(head.updated) - timedelta(seconds=seconds)).astimezone(UTC)
    store.events.heads.col.update_one({"_id": sid}, {"$set": {"updated": then.isoformat(timespec="milliseconds")}})
    store.sessions.col.update_one({"_id": sid}, {"$inc": {"last_ts": -seconds}})


def test_a_cycle_in_flight_is_not_deleted_unless_forced_and_a_forced_deletion_fences_it(db, tg_home, capsys):
    with connect(db) as store:
        sid = run_state_machine("AAPL,MSFT", "2012-06-01", store=store).session_id
        book = store.portfolios.load(sid)
        slow = GatedModel(model_name="offline-quick")
        rt = default_services(AgentConfig(), model_factory=lambda c, tier: slow)
        ended: dict = {}

        def second_cycle():
            try:
                ended["outcome"] = run_state_machine(
                    "AAPL,MSFT", "2012-06-04", store=store, session_id=sid, services=rt
                )
            except BaseException as e:  # noqa: BLE001 - what the fenced cycle raised is the test's to read
                ended["error"] = e

        thread = threading.Thread(target=second_cycle)
        thread.start()
        try:
            assert slow.wait_entered(), "the second cycle never reached its model"
            time.sleep(0.5)  # its events so far stored (the writer gathers for 20 ms), then a long model call:
            quiet_for(store, sid, 120)  # the session's last write two minutes back, as the 60 s head rule reads it
            seq_at_delete = store.events.count(sid)
            assert main(["sessions", "delete", sid, "--db", db]) == 2
            err = capsys.readouterr().err
            assert f"session '{sid}' has cycle {sid}:c2 in flight" in err and "force" in err, err
            assert main(["sessions", "prune", "--older-than", "1m", "--db", db]) == 0
            out = capsys.readouterr().out
            assert f"kept {sid}: it has cycle {sid}:c2 in flight" in out, out
            assert store.events.exists(sid) and store.portfolios.load(sid) == book

            assert main(["sessions", "delete", sid, "--force", "--by", "alice", "--db", db]) == 0
            capsys.readouterr()
        finally:
            slow.open()
            thread.join(120)
        assert not thread.is_alive()
        assert isinstance(ended.get("error"), running.SessionDeleted), ended
        assert "deleted by alice" in str(ended["error"])
        # nothing of the running cycle outlived the deletion: no event (seq > 0), head, book, ledger, summary
        assert store.events.count(sid) == 0 and store.events.heads.get(sid) is None, seq_at_delete
        assert store.portfolios.load(sid) is None and not store.executions.col.find_one({"session_id": sid})
        assert store.sessions.get(sid) is None and not store.running.live(sid)
    assert main(["replay", sid, "--check-chain", "--db", db]) == 2
    err = capsys.readouterr().err
    assert f"unknown session '{sid}': deleted" in err and "by alice" in err and "broken" not in err, err


def test_prune_keeps_a_cycle_paused_for_approval_unless_forced(db, tg_home, capsys):
    with connect(db) as store:
        paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, approve=True)
        sid = paused.session_id
        assert paused.status == "pending_approval"
        quiet_for(store, sid, 120)
    assert main(["sessions", "prune", "--older-than", "1m", "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"kept {sid}: it has cycle {paused.cycle_id} paused waiting for approval" in out, out
    assert "nothing to delete" in out
    with connect(db) as store:
        assert store.events.exists(sid) and store.sessions.get(sid)["status"] == "pending_approval"
    assert main(["approve", sid, "--by", "alice", "--db", db]) == 0  # the person's decision still lands
    capsys.readouterr()

    with connect(db) as store:
        again = run_state_machine("AAPL,MSFT", "2012-06-04", store=store, session_id=sid, approve=True)
        quiet_for(store, sid, 120)
    assert main(["sessions", "prune", "--older-than", "1m", "--force", "--db", db]) == 0
    assert f"deleted {sid}" in capsys.readouterr().out
    assert main(["approve", sid, "--db", db]) == 2
    assert "deleted" in capsys.readouterr().err and again.status == "pending_approval"


def test_a_fill_landing_after_a_fence_is_removed_again(db):
    with connect(db) as store:
        lease = store.running.start("S", "S:c1")
        entered = running.entered(lease)
        try:
            paper = PaperExecution(store, AgentConfig())
            after = PortfolioSnapshot(cash=50.0).model_dump(mode="json")
            real_commit = store.portfolios.commit

            def commit_then_fenced(*a, **k):  # the deletion fences between the fill's two writes
                done = real_commit(*a, **k)
                store.running.fence(["S"], {"by": "alice", "at": time.time(), "admin_seq": 7})
                return done

            store.portfolios.commit = commit_then_fenced
            with pytest.raises(running.SessionDeleted, match="deleted by alice .* admin log record 7"):
                paper.record("S:c1", "S", {"portfolio_after": after, "status": "filled"}, base_version=0)
            assert store.portfolios.load("S") is None and store.executions.entry("S:c1") is None
            # and once fenced, a cycle fills nothing at all
            with pytest.raises(running.SessionDeleted):
                paper.record("S:c2", "S", {"portfolio_after": after, "status": "filled"}, base_version=0)
            assert store.executions.entry("S:c2") is None
        finally:
            running.left(entered)
            lease.end()


def test_a_backtest_session_with_its_task_running_is_not_deleted_unless_forced(db, tg_home, tmp_path, capsys):
    """The task as the kernel writes it (queued, owned by this process, heartbeat fresh) on a backtest's session that
    is quiet between two cycles: refused naming the task; once the task's owner is gone (heartbeat stale), allowed."""
    from pydantic import BaseModel

    from graph.kernel.tasks import TaskManager

    class Params(BaseModel):
        run_id: str = "bt1"

    with connect(db) as store:
        sid = "bt-bt1"
        store.events.append(
            [
                {
                    "event_id": uuid.uuid4().hex,
                    "session_id": sid,
                    "cycle_id": f"{sid}:c1",
                    "ts": 1e9,
                    "state": "RUNNER",
                    "kind": "manifest",
                    "payload": {},
                }
            ]
        )
        quiet_for(store, sid, 120)
        tasks = TaskManager(store, lambda *a, **k: None, tmp_path)
        task_id = tasks.create("backtest", Params(), "bt1", tmp_path / "bt1", {"done": 0, "total": 3})
    assert main(["sessions", "delete", sid, "--db", db]) == 2
    err = capsys.readouterr().err
    assert f"kernel task {task_id} (backtest) queued on it" in err, err
    with connect(db) as store:
        store.db["tasks"].update_one({"_id": task_id}, {"$set": {"heartbeat_at": time.time() - 600}})
    assert main(["sessions", "delete", sid, "--db", db]) == 0
    assert f"deleted {sid}" in capsys.readouterr().out
