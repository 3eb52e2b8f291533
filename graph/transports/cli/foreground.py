"""A kernel task the CLI starts and waits for in the foreground (backtest, benchmark, sweep): a stored task run by a
thread of this process (so HTTP and MCP see it and can cancel it), followed here with run_backtest's progress bar."""

from __future__ import annotations

import functools
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Optional


def wait_for(k, capability: str, inputs: dict, args, *, what: str, resume: Callable) -> tuple:
    """Start the task and wait for it to succeed: (its first view, its last view). Ctrl-C cancels it, which stops
    after its current decision point, resumable; a second Ctrl-C, or the store going away, stops it at once without
    logging the point under way. Anything but success raises, naming how to resume (`resume(task)`)."""
    from graph.kernel.errors import Failed, StoreUnavailable, exit_code, from_line
    from graph.transports.cli.common import CliError

    task, interrupted = started(k, capability, inputs)
    following = Waited()
    try:
        if interrupted:
            raise KeyboardInterrupt
        view = following.run(lambda: _follow(k, task, shows_progress(args), following))
    except KeyboardInterrupt:
        following.halt()  # its bar is closed here, now: the process may end before the thread looks again
        print(
            f"tradegraph: stopping after the current decision point (the {what} resumes with {resume(task)}); "
            f"Ctrl-C again stops at once",
            file=sys.stderr,
        )
        try:
            Waited().run(lambda: cancel_and_join(k, task))
        except BaseException:  # a second Ctrl-C, or the store gone while stopping: at once
            _stop_at_once(k, task)
            raise
        raise
    except StoreUnavailable as e:  # the store went away under the run: one line, and it resumes at that point
        _stop_at_once(k, task)
        raise CliError(
            f"{e.message}; the {what} stopped before its next decision point was logged: run the same "
            f"command ({resume(task)}) once the store is back",
            exit_code(e),
        ) from None
    except BaseException:
        _stop_at_once(k, task)
        raise
    k.tasks.join(task.task_id)  # its last writes land before the store closes
    if view.status != "succeeded":
        raise (
            from_line(view.error)
            if view.error
            else Failed(f"{what} task {task.task_id} {view.status}; resume it with {resume(task)}")
        )
    return task, view


# how long a second Ctrl-C gives the work to fail on its closed store before the command exits regardless
AT_ONCE_WAIT_S = 5.0


class Waited:
    """A foreground command's store calls, run on a thread of their own while the main thread only sleeps.

    Python raises a Ctrl-C's KeyboardInterrupt in the main thread between any two of its bytecodes. Inside pymongo,
    that can be after a pool lock was taken and before the `with` that releases it was entered: the lock is then
    held by no one for ever, and the next store call (the cancel, the store's own close at exit) waits on it for
    ever. A backtest stopped with Ctrl-C twice hung so (tests/faults/test_backtest_interrupt.py, py-spy: every
    thread waiting on one pool's lock). Here the interrupt lands in `time.sleep` or in reading a plain attribute,
    which hold no lock; the thread is a daemon, so an abandoned one never holds the exit up."""

    _POLL_S = 0.05  # how soon a Ctrl-C is handled, at worst, and how often an idle foreground command wakes

    def __init__(self) -> None:
        # plain attributes, set by one thread and read by another (atomic under the GIL): no lock to leave held
        self.done, self.stop = False, False
        self.value: Any = None
        self.error: Optional[BaseException] = None
        # what fn opened that the waiting thread closes when it stops waiting (a progress bar); the lock is taken
        # by the main thread only once it has stopped waiting (halt), never while a first Ctrl-C can land
        self._opened: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        """fn's value, or its exception re-raised here, once it returns; a Ctrl-C raises here at once, fn going
        on (it reads `stop` where it can end early)."""
        threading.Thread(target=self._call, args=(fn,), name="cli-foreground", daemon=True).start()
        return self.outcome()

    def outcome(self) -> Any:
        """Wait for fn as run() does (again, after a Ctrl-C ended run's wait): its value, or its exception."""
        while not self.done:
            time.sleep(self._POLL_S)
        if self.error is not None:
            raise self.error
        return self.value

    def opened(self, make: Callable[[], Any], close: Callable[[Any], None]) -> Any:
        """From fn: make something the waiting thread closes if it stops waiting first (halt), and return it; None,
        made not, once it has stopped."""
        with self._lock:
            if self.stop:
                return None
            thing = make()
            self._opened.append(lambda: close(thing))
            return thing

    def halt(self) -> None:
        """Stop waiting: fn ends where it next reads `stop`, and what it opened is closed now, from this thread."""
        with self._lock:
            self.stop = True
            opened, self._opened = self._opened, []
        for close in opened:
            close()

    def _call(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread, which raises it
            self.error = e
        finally:
            self.done = True


def started(k, capability: str, inputs: dict) -> tuple[Any, bool]:
    """(the task, whether a Ctrl-C came while it started). The start runs off the main thread and is waited for to
    its end even then (its error raised): a Ctrl-C never cuts it, and the task it made is stopped like any other."""
    starting = Waited()
    try:
        return starting.run(lambda: k.call(capability, inputs, transport="cli")), False
    except KeyboardInterrupt:
        return starting.outcome(), True


def cancel_and_join(k, task) -> None:
    """Cancel the task (it stops after its current decision point) and wait for its worker here to end."""
    k.call("cancel_task", {"task_id": task.task_id}, transport="cli")
    k.tasks.join(task.task_id)


def shows_progress(args) -> bool:
    """A foreground command draws its bar on a terminal, unless it prints JSON or was told not to."""
    return not args.json and not args.no_progress and sys.stderr.isatty()


def close_under(waited: Waited, stores: list) -> None:
    """A second Ctrl-C: the stores closed under the work, which fails where it is (its events spooled), and given
    AT_ONCE_WAIT_S to end. A further Ctrl-C is ignored from here: it could only break the close half-way."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for store in stores:
        store.close()
    deadline = time.monotonic() + AT_ONCE_WAIT_S
    while not waited.done and time.monotonic() < deadline:
        time.sleep(Waited._POLL_S)


def _stop_at_once(k, task) -> None:
    """Close the store under the task's thread, so that whatever it waits on ends now, and give it a moment to
    end tidily. The cycle under way then fails on the closed store (its events spooled): the loop logs no such
    cycle as its point's decision, so the resumed run decides that point again. A further Ctrl-C is ignored from
    here: it could only break the close half-way (cli/main.py does the same once a command is interrupted)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    k.store.close()
    k.tasks.join(task.task_id, timeout_s=AT_ONCE_WAIT_S)


def _follow(k, task, progress: bool, following: Waited):
    """The task's views until it ends or the command stops following (the SSE stream's source), drawn as
    run_backtest's own bar."""
    from graph.services.backtest.loop import _Progress

    bar, shown, view = None, 0, task
    try:
        for view in k.watch(task.task_id, poll_s=0.2):
            if following.stop:
                break
            p = view.progress
            if bar is None and p.total:
                bar = following.opened(functools.partial(_Progress, p.total, p.done, progress), _Progress.close)
                if bar is None:  # stopped following meanwhile
                    break
                shown = p.done
            while bar is not None and shown < p.done:  # the bar advances one decision point at a time
                bar.update(p.date or "", p.equity or 0.0, p.trades)
                shown += 1
    finally:
        if bar is not None:
            bar.close()
    return view
