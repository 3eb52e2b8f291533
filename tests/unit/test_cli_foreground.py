"""A Ctrl-C never cuts a foreground command's store call in the middle (graph/transports/cli/foreground.py Waited).

Python raises a Ctrl-C's KeyboardInterrupt in the main thread between any two bytecodes; landing inside pymongo
after a pool lock was taken and before the `with` releasing it was entered, it left the lock held for ever, and a
backtest stopped with Ctrl-C twice hung on the next store call. The store calls now run on a thread of their own,
so a real SIGINT sent while one is under way ends the wait at once and the call itself runs to its end."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from graph.transports.cli.foreground import Waited, wait_for
from tests.signals import ctrl_c, default_ctrl_c  # noqa: F401 - default_ctrl_c is a fixture


def test_a_ctrl_c_during_a_store_call_raises_in_the_waiter_and_the_call_runs_to_its_end(default_ctrl_c):
    lock, inside, finish, finished = threading.Lock(), threading.Event(), threading.Event(), threading.Event()

    def store_call() -> str:
        with lock:  # what pymongo holds while it checks a connection out
            inside.set()
            ctrl_c()
            finish.wait(10)
        finished.set()
        return "answer"

    waited = Waited()
    with pytest.raises(KeyboardInterrupt):
        waited.run(store_call)
    assert inside.is_set() and not finished.is_set(), "the Ctrl-C was raised only after the call had ended"
    finish.set()
    assert finished.wait(10), "the call was cut by the Ctrl-C instead of running to its end"
    assert lock.acquire(timeout=1), "the call's lock was left held"
    lock.release()
    for _ in range(200):  # its outcome is kept for whoever reads it after
        if waited.done:
            break
        finished.wait(0.01)
    assert waited.done and waited.value == "answer" and waited.error is None


def test_the_calls_value_is_returned_and_its_error_raised_where_it_is_waited_for():
    assert Waited().run(lambda: 42) == 42

    def fails() -> None:
        raise LookupError("no such task t-1")

    with pytest.raises(LookupError, match="no such task t-1"):
        Waited().run(fails)


def test_stopping_closes_what_the_call_opened_now_from_the_waiting_thread(default_ctrl_c):
    """A progress bar the follower opened is closed by the main thread as it stops waiting: the process may exit
    before the follower looks again (a terminal was left with its cursor hidden and a stale bar redrawn)."""
    closed_by, release = [], threading.Event()

    def follow() -> None:
        bar = waited.opened(lambda: "bar", lambda _bar: closed_by.append(threading.current_thread()))
        assert bar == "bar"
        ctrl_c()
        release.wait(10)  # a poll that has not come back yet

    waited = Waited()
    with pytest.raises(KeyboardInterrupt):
        waited.run(follow)
    assert closed_by == []
    waited.halt()
    assert closed_by == [threading.main_thread()], "the bar was not closed at once by the thread that stopped"
    assert waited.opened(lambda: pytest.fail("made after the stop"), lambda _bar: None) is None
    release.set()


class _StartingKernel:
    """A kernel whose task start is still doing its store work when the Ctrl-C comes."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.tasks = SimpleNamespace(join=lambda task_id, timeout_s=None: self.calls.append(f"join {task_id}"))

    def call(self, name: str, inputs: dict, transport: str):
        self.calls.append(name)
        if name == "start_backtest":
            ctrl_c()
            time.sleep(0.3)
            self.calls.append("started")
            return SimpleNamespace(task_id="t-1", run_id="k")
        return None


def test_a_ctrl_c_while_the_task_starts_waits_for_the_start_then_cancels_the_task(default_ctrl_c, capsys):
    k = _StartingKernel()
    args = SimpleNamespace(json=True, no_progress=True)
    with pytest.raises(KeyboardInterrupt):
        wait_for(k, "start_backtest", {}, args, what="backtest", resume=lambda t: f"--run-id {t.run_id}")
    assert k.calls == ["start_backtest", "started", "cancel_task", "join t-1"], k.calls
    assert "resumes with --run-id k" in capsys.readouterr().err


def test_a_start_that_fails_raises_its_own_error():
    class Refusing(_StartingKernel):
        def call(self, name: str, inputs: dict, transport: str):
            raise LookupError("--prices data/acme2.csv: no such file")

    args = SimpleNamespace(json=True, no_progress=True)
    with pytest.raises(LookupError, match="no such file"):
        wait_for(Refusing(), "start_backtest", {}, args, what="backtest", resume=lambda t: "")
