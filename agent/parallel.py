"""Fan-out for independent LLM calls (analysts, bull/bear).

A real model waits on the network, so its calls run on a shared thread pool. The offline model
is pure CPU under the GIL, where threads only add start-up cost and reorder the audit log, so
it runs the same tasks inline, in a fixed order.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tradegraph-llm")
    return _POOL


def run_parallel(tasks: Mapping[str, Callable[[], T]], *, parallel: bool) -> dict[str, T]:
    """Runs every task; the first exception (in task order) is re-raised after all have finished."""
    if not parallel:
        return {k: fn() for k, fn in tasks.items()}
    futures = {k: _pool().submit(contextvars.copy_context().run, fn) for k, fn in tasks.items()}
    results, first_error = {}, None
    for k, f in futures.items():
        try:
            results[k] = f.result()
        except BaseException as e:  # noqa: BLE001 - wait for the rest before raising, so no call outlives the state
            first_error = first_error or e
    if first_error is not None:
        raise first_error
    return results
