"""Ctrl-C as a terminal sends it, for the tests of where a foreground command's interrupt lands."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest


def ctrl_c() -> None:
    """A real SIGINT to the process's main thread, now (its handler runs there, between two bytecodes)."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]


@pytest.fixture
def default_ctrl_c() -> Iterator[None]:
    """Python's own SIGINT handler (a runner may have set another), restored after."""
    assert threading.current_thread() is threading.main_thread(), "a signal's handler runs in the main thread only"
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def join_foreground(timeout_s: float = 30.0) -> None:
    """Wait for the command threads a test left behind (foreground.py Waited) to end: one still running after its
    test could reach a later test's patches, or send its Ctrl-C when no test is waiting for it."""
    for t in [t for t in threading.enumerate() if t.name == "cli-foreground"]:
        t.join(timeout_s)
        assert not t.is_alive(), "a foreground command's thread outlived its test"


def interrupting(method: Callable) -> tuple[Callable, threading.Lock, threading.Event]:
    """`method` as a store call a real Ctrl-C reaches while it holds its lock (the first call only); (the call, its
    lock, set once the call ran to its end)."""
    lock, finished = threading.Lock(), threading.Event()

    def call(*args, **kwargs):
        with lock:  # what pymongo holds while it checks a connection out
            if not finished.is_set():
                ctrl_c()
                time.sleep(0.3)  # the call still under way when the interrupt is handled
                finished.set()
            return method(*args, **kwargs)

    return call, lock, finished


def hanging_through_two(method: Callable) -> tuple[Callable, threading.Event, threading.Event]:
    """`method` as a store call that hangs, as on a store gone quiet, while two Ctrl-Cs come (the first call only;
    the abandoned work's later calls go through); (the call, `release` ending the hang, `under_way` while it hangs)."""
    release, under_way = threading.Event(), threading.Event()

    def call(*args, **kwargs):
        if release.is_set():
            return method(*args, **kwargs)
        under_way.set()
        try:
            ctrl_c()
            time.sleep(0.2)
            ctrl_c()
            release.wait(30)  # only the store's close, or the test, ends it
            return method(*args, **kwargs)
        finally:
            under_way.clear()

    return call, release, under_way


def stuck_under_two(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> tuple[threading.Event, list]:
    """`owner.name` patched to hang through two Ctrl-Cs (`hanging_through_two`), every store's close recorded as
    (the thread that closed it, whether the call still hung), and a second Ctrl-C's wait cut to 0.3 s;
    (`release` ending the hang, the closes)."""
    from database.connection import Store
    from graph.transports.cli import foreground

    stuck, release, under_way = hanging_through_two(getattr(owner, name))
    closed: list = []
    monkeypatch.setattr(Store, "close", lambda self: closed.append((threading.current_thread(), under_way.is_set())))
    monkeypatch.setattr(owner, name, stuck)
    monkeypatch.setattr(foreground, "AT_ONCE_WAIT_S", 0.3)
    return release, closed
