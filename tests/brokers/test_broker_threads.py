"""The broker path's kept worker threads (graph/machine/broker/threads.py)."""

from __future__ import annotations

import os
import threading

from graph.machine.broker.threads import broker_threads
from graph.machine.broker.waves import WIDEST


def test_every_worker_is_running_once_the_pool_is_first_asked_for():
    pool = broker_threads()
    names = {t.name for t in threading.enumerate() if t.name.startswith("broker")}
    assert len(names) >= WIDEST, names
    assert broker_threads() is pool  # kept: a later cycle starts none


def test_a_forked_child_gets_a_pool_of_its_own_that_answers():
    broker_threads()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are gone, an inherited pool would hang on its first task
        try:
            answer = broker_threads().submit(lambda: 42).result(timeout=10)
            os.write(w, str(answer).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 16)
    os.waitpid(pid, 0)
    assert got == b"42"
