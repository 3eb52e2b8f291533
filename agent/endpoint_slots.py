"""At most n requests in flight to one endpoint (the tier's `concurrency`, agent/providers.py with_concurrency).

A server that answers one request at a time (llama.cpp's) queues the rest, and a request's timeout runs while it
waits there: three parallel analysts against it timed out (measured, docs/stockbench.md). Waiting here instead,
before the request is sent, gives each request its whole timeout for the answer. One semaphore per endpoint and
cap, shared by every model of the process that calls it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Optional

_LOCK = threading.Lock()
_SLOTS: dict[tuple[str, int], threading.BoundedSemaphore] = {}


def _slots(endpoint: str, n: int) -> threading.BoundedSemaphore:
    with _LOCK:
        return _SLOTS.setdefault((endpoint, n), threading.BoundedSemaphore(n))


@contextlib.contextmanager
def endpoint_slot(choices: dict[str, Any]) -> Iterator[None]:
    """Held while one request is in flight, when the model's choices cap its endpoint; else nothing."""
    n: Optional[int] = choices.get("concurrency")
    endpoint = choices.get("endpoint")
    if not n or not endpoint:
        yield
        return
    slot = _slots(str(endpoint), int(n))
    with slot:
        yield
