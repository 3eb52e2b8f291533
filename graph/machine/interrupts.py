"""A Ctrl-C the CLI received, delivered to its cycle where that is safe: as the cycle enters its next state.

Python raises a Ctrl-C in the main thread between any two bytecodes; inside pymongo that can leave a pool lock held
for ever, and the next store call (the runner auditing the interrupt, the store's close) then hangs
(graph/transports/cli/foreground.py). A foreground `run` or `approve` runs its cycle on a thread of its own inside
`stoppable(asked)`, and its Ctrl-C only sets `asked`; `guarded` (nodes/common.py) raises it as the next state is
entered. The cycle then ends as an interrupted cycle always has (the runner audits the KeyboardInterrupt as its
error, the ledger says whether anything executed), and the state under way, EXECUTING's orders included, is never
cut half-way. A context variable, not a flag of the process: LangGraph runs nodes in its executor's threads with the
caller's context, and a cycle outside `stoppable` (every other one, a replay's included) is never asked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional

_asked: ContextVar[Optional[threading.Event]] = ContextVar("tradegraph_stop_asked", default=None)


@contextmanager
def stoppable(asked: threading.Event) -> Iterator[None]:
    """Cycles run inside stop as they enter their next state once `asked` is set."""
    token = _asked.set(asked)
    try:
        yield
    finally:
        _asked.reset(token)


def raise_if_asked(state: str, cycle_id: Optional[str] = None) -> None:
    """A KeyboardInterrupt (what the log has always recorded for a Ctrl-C) whose `stopped_before` names the state
    it stopped before, nothing of which has run; its message names the cycle, so the one line the CLI prints says
    which session to look at."""
    asked = _asked.get()
    if asked is not None and asked.is_set():
        stop = KeyboardInterrupt(f"stopped by Ctrl-C before {state}" + (f" in cycle {cycle_id}" if cycle_id else ""))
        stop.stopped_before = state  # type: ignore[attr-defined]
        raise stop


def stopped_before(error: BaseException) -> str | None:
    """The state a Ctrl-C asked here stopped the cycle before, else None."""
    return getattr(error, "stopped_before", None) if isinstance(error, KeyboardInterrupt) else None


def mark_filled(error: BaseException) -> None:
    """Note on the error that crashed a cycle out of its graph that its orders had filled (its log ends
    `executed_with_errors`), so the caller's exit says it too, never a bare Ctrl-C or failure a script might answer
    by running the cycle again."""
    error.orders_filled = True  # type: ignore[attr-defined]


def filled_note(error: BaseException) -> str:
    """What the one line reporting this error adds when the cycle it crashed had filled its orders (`mark_filled`),
    else nothing: the CLI's Ctrl-C line and the kernel's error say it alike."""
    return "; its orders filled: executed_with_errors" if getattr(error, "orders_filled", False) is True else ""
