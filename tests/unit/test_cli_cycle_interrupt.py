"""Ctrl-C on `tradegraph run` and `approve` (graph/transports/cli/cycle.py, graph/machine/interrupts.py): the cycle
runs on a thread of its own, so a real SIGINT never lands inside one of its store calls; it stops the cycle as the
cycle enters its next state, and the state under way, EXECUTING's fill included, ends first. The session's log then
holds the interrupt as the cycle's error, and how the cycle ended says whether anything executed."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest

from database.connection import connect
from graph.machine.execution import PaperExecution
from graph.machine.memory import MemoryBank
from graph.machine.recording import load_session_log
from graph.transports.cli.main import EXIT_EXECUTED_WITH_ERRORS, main
from tests.signals import (  # noqa: F401 - default_ctrl_c is a fixture
    ctrl_c,
    default_ctrl_c,
    interrupting,
    join_foreground,
    stuck_under_two,
)


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    return f"mongomock://localhost/int_{uuid.uuid4().hex[:8]}"


def _only_session(db: str):
    store = connect(db)
    (summary,) = store.sessions.list(10).sessions
    return store, summary["session_id"]


def _states(store, session_id):
    return [e["payload"]["to"] for e in store.events.read(session_id, kind="transition")]


def test_a_ctrl_c_inside_a_store_call_lets_it_end_and_stops_the_cycle_before_its_next_state(
    db, monkeypatch, capsys, default_ctrl_c
):
    call, lock, finished = interrupting(MemoryBank.search)  # ANALYZING's analysts recall their notes
    monkeypatch.setattr(MemoryBank, "search", call)
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--db", db]) == 130
    err = capsys.readouterr().err
    assert finished.is_set(), "the Ctrl-C cut the store call"
    assert lock.acquire(timeout=1), "the store call's lock was left held"
    lock.release()
    assert "stopping as the cycle enters its next state" in err
    store, sid = _only_session(db)
    assert err.strip().endswith(f"tradegraph: interrupted: stopped by Ctrl-C before DEBATE in cycle {sid}:c1"), err
    assert _states(store, sid)[-1] == "ANALYZING", _states(store, sid)  # nothing after the state under way
    (cycle,) = load_session_log(store, sid).cycles
    (error,) = [e["payload"] for e in store.events.read(sid, kind="error")]  # the interrupt, audited as the error
    assert (
        error["type"] == "KeyboardInterrupt"
        and error["message"] == f"stopped by Ctrl-C before DEBATE in cycle {sid}:c1"
    )
    assert cycle.recorded_status == "failed" and store.executions.get(cycle.cycle_id) is None  # nothing executed


def test_a_ctrl_c_during_the_fill_lets_it_land_and_the_cycle_says_it_executed(db, monkeypatch, capsys, default_ctrl_c):
    call, _, finished = interrupting(PaperExecution.record)
    monkeypatch.setattr(PaperExecution, "record", call)
    # its orders filled: the exit is executed_with_errors' own, never a bare 130 a script would answer by running it again
    assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--db", db]) == EXIT_EXECUTED_WITH_ERRORS
    assert finished.is_set(), "the Ctrl-C cut the fill"
    err = capsys.readouterr().err
    assert f"stopped by Ctrl-C before MEMORIZING in cycle {_only_session(db)[1]}:c1; its orders filled" in err, err
    store, sid = _only_session(db)
    (cycle,) = load_session_log(store, sid).cycles
    assert store.executions.get(cycle.cycle_id) is not None  # the fill landed whole
    assert cycle.recorded_status == "executed_with_errors"  # never read as "nothing executed"


def test_a_second_ctrl_c_closes_the_store_under_a_stuck_cycle(db, monkeypatch, capsys, default_ctrl_c):
    release, closed = stuck_under_two(monkeypatch, MemoryBank, "search")
    try:
        assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--db", db]) == 130
        assert closed and closed[0] == (threading.main_thread(), True), closed
    finally:
        release.set()
        join_foreground()


def test_a_ctrl_c_while_the_store_opens_starts_no_cycle(db, monkeypatch, capsys, default_ctrl_c):
    from graph.transports.cli import cycle

    opened = cycle.kernel

    @contextlib.contextmanager
    def slow_open(*args, **kwargs):
        with opened(*args, **kwargs) as k:
            ctrl_c()  # the store just opened, the capability not called yet
            time.sleep(0.3)
            yield k

    monkeypatch.setattr(cycle, "kernel", slow_open)
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--db", db]) == 130
    assert connect(db).sessions.list(10).sessions == []  # nothing written: no session, no cycle


@pytest.mark.parametrize(
    "argv,code,says",
    [
        (["approve", "s-nope"], 2, "s-nope"),  # its error and its exit code, not "interrupted"
        (["run", "--symbols", "AAPL", "--as-of", "2012-06-01"], 0, "session:"),  # its status, on stdout
    ],
)
def test_a_ctrl_c_just_after_the_call_ended_leaves_its_outcome_standing(
    db, monkeypatch, capsys, default_ctrl_c, argv, code, says
):
    from graph.transports.cli import foreground

    call = foreground.Waited._call

    def then_ctrl_c(self, fn):
        call(self, fn)  # ended: its value or its error kept
        ctrl_c()  # before the waiting thread looks again (every 50 ms)

    monkeypatch.setattr(foreground.Waited, "_call", then_ctrl_c)
    try:
        assert main([*argv, "--db", db]) == code
    finally:
        join_foreground()
    out = capsys.readouterr()
    assert says in out.out + out.err and "interrupted" not in out.err, out


def test_an_approval_stopped_during_its_fill_settles_its_claim_as_executed(db, monkeypatch, capsys, default_ctrl_c):
    assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--db", db]) == 0
    store, sid = _only_session(db)
    call, _, finished = interrupting(PaperExecution.record)
    monkeypatch.setattr(PaperExecution, "record", call)
    assert main(["approve", sid, "--by", "alice", "--db", db]) == EXIT_EXECUTED_WITH_ERRORS
    assert finished.is_set()
    capsys.readouterr()
    assert main(["approve", sid, "--by", "bob", "--db", db]) == 2  # decided: refused, naming how it ended
    err = capsys.readouterr().err
    assert "executed_with_errors" in err and "ended failed" not in err, err


def test_a_ctrl_c_between_the_approvals_check_and_executing_records_nothing_and_leaves_it_paused(
    db, monkeypatch, capsys
):
    """The Ctrl-C asked after approve_cycle's own check, as the resumed cycle starts: EXECUTING's check stops it
    before the answer is taken. Nothing is recorded (it was: an error and a `failed` end for a cycle still
    waiting), the claim is released, and the next approval goes through."""
    from graph.machine import interrupts, runner
    from graph.transports.cli.common import kernel

    assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--db", db]) == 0
    store, sid = _only_session(db)
    before = len(store.events.read(sid))
    asked, invoke = threading.Event(), runner._invoke

    def asked_as_it_resumes(*args, **kwargs):
        asked.set()
        return invoke(*args, **kwargs)

    monkeypatch.setattr(runner, "_invoke", asked_as_it_resumes)
    with interrupts.stoppable(asked), kernel(db) as k:
        with pytest.raises(KeyboardInterrupt, match="before EXECUTING"):
            k.call("approve", {"session_id": sid, "approved": True, "by": "alice"}, transport="cli")
    monkeypatch.setattr(runner, "_invoke", invoke)
    assert len(store.events.read(sid)) == before  # not an error, not an end: the cycle still waits
    assert main(["approve", sid, "--by", "bob", "--json", "--db", db]) == 0
    (cycle,) = load_session_log(store, sid).cycles
    assert cycle.recorded_status == "completed" and cycle.approval and cycle.approval["by"] == "bob"


def _failing_checkpoints(monkeypatch, when):
    """The approval's checkpoint store failing on a write `when(filled)` says: the crash leaves the graph."""
    from langgraph.checkpoint.mongodb import MongoDBSaver

    filled, record, put = threading.Event(), PaperExecution.record, MongoDBSaver.put

    def recording(self, *a, **k):
        out = record(self, *a, **k)
        filled.set()
        return out

    def failing(self, *a, **k):
        if when(filled.is_set()):
            raise RuntimeError("checkpoint write failed")
        return put(self, *a, **k)

    monkeypatch.setattr(PaperExecution, "record", recording)
    monkeypatch.setattr(MongoDBSaver, "put", failing)
    return filled


def test_an_approval_that_crashes_after_its_fill_exits_as_executed_not_as_failed(db, monkeypatch, capsys):
    # exit 1 ("failed, nothing executed") would let a script approve or run the cycle again
    assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--db", db]) == 0
    store, sid = _only_session(db)
    filled = _failing_checkpoints(monkeypatch, lambda filled: filled)
    capsys.readouterr()
    assert main(["approve", sid, "--by", "alice", "--db", db]) == EXIT_EXECUTED_WITH_ERRORS
    err = capsys.readouterr().err
    assert filled.is_set() and err.count("\n") == 1, err  # one line, naming the crash and the fill
    assert "RuntimeError: checkpoint write failed; its orders filled: executed_with_errors" in err, err
    (cycle,) = load_session_log(store, sid).cycles
    assert store.executions.get(cycle.cycle_id) is not None and cycle.recorded_status == "executed_with_errors"


def test_the_kernel_reports_a_crash_after_the_fill_as_executed_with_errors_on_every_transport(db, monkeypatch):
    from graph.kernel.core import Kernel
    from graph.kernel.errors import ExecutedWithErrors, exit_code, http_status

    assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--db", db]) == 0
    store, sid = _only_session(db)
    _failing_checkpoints(monkeypatch, lambda filled: filled)
    with pytest.raises(ExecutedWithErrors) as e:
        Kernel(store).call("approve", {"session_id": sid, "approved": True, "by": "alice"})
    # HTTP's body and MCP's tool error carry the kind; the CLI's exit is executed_with_errors' own
    assert e.value.to_dict()["error"] == "executed_with_errors" and "checkpoint write failed" in e.value.message
    assert (exit_code(e.value), http_status(e.value)) == (4, 500)
