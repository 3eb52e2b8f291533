"""Ctrl-C as a terminal sends it, for the tests of where a foreground command's interrupt lands."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

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
