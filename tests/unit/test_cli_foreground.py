"""A Ctrl-C never cuts a foreground command's store call in the middle (graph/transports/cli/foreground.py Waited).

Python raises a Ctrl-C's KeyboardInterrupt in the main thread between any two bytecodes; landing inside pymongo
after a pool lock was taken and before the `with` releasing it was entered, it left the lock held for ever, and a
backtest stopped with Ctrl-C twice hung on the next store call. The store calls now run on a thread of their own,
so a real SIGINT sent while one is under way ends the wait at once and the call itself runs to its end."""

from __future__ import annotations

import signal
import threading

import pytest

from graph.transports.cli.foreground import Waited


@pytest.fixture
def default_ctrl_c():
    """Python's own SIGINT handler (a runner may have set another), restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_during_a_store_call_raises_in_the_waiter_and_the_call_runs_to_its_end(default_ctrl_c):
    assert threading.current_thread() is threading.main_thread(), "a signal's handler runs in the main thread only"
    lock, inside, finish, finished = threading.Lock(), threading.Event(), threading.Event(), threading.Event()

    def store_call() -> str:
        with lock:  # what pymongo holds while it checks a connection out
            inside.set()
            # Ctrl-C, as the terminal sends it: a real SIGINT to the process's main thread, now
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
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
