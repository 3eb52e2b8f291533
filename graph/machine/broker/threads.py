"""The broker path's worker threads, started once per process and kept.

A cycle's first store reads, its checks and its order waves each ran in a ThreadPoolExecutor of their own, so every
cycle started ~19 threads between the approval and its last order, each start waiting for a GIL the running
requests held: ~40 ms of a 20-order cycle's overhead (cProfile: threading.Thread.start). Tasks given to this pool
never wait on another of its tasks (each waits on the store or the broker only), so cycles sharing it cannot
deadlock: at worst one waits for a thread another cycle holds."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from graph.machine.broker.waves import WIDEST

_pool: Optional[ThreadPoolExecutor] = None
_lock = threading.Lock()


def _forget_in_child() -> None:
    # a forked child has none of its parent's threads: a pool inherited from it would queue tasks forever
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def broker_threads() -> ThreadPoolExecutor:
    """The process's pool, its WIDEST threads started the first time it is asked for (a backend is built before
    the approval it waits for, so they are already running when the orders go)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WIDEST, thread_name_prefix="broker")
            _start_all(_pool)
        return _pool


def _start_all(pool: ThreadPoolExecutor) -> None:
    # each task holds its thread until all have started, so the pool cannot reuse one and must start them all
    ready = threading.Barrier(WIDEST + 1)
    for _ in range(WIDEST):
        pool.submit(ready.wait, 5.0)
    try:
        ready.wait(5.0)
    except threading.BrokenBarrierError:  # a starved machine: threads still start, on demand, as before
        pass
