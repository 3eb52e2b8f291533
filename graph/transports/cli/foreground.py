"""A kernel task the CLI starts and waits for in the foreground (backtest, benchmark, sweep): a stored task run by a
thread of this process (so HTTP and MCP see it and can cancel it), followed here with run_backtest's progress bar."""

from __future__ import annotations

import sys
from collections.abc import Callable


def wait_for(k, capability: str, inputs: dict, args, *, what: str, resume: Callable) -> tuple:
    """Start the task and wait for it to succeed: (its first view, its last view). Ctrl-C cancels it, which stops
    after its current decision point, resumable; a second Ctrl-C, or the store going away, stops it at once without
    logging the point under way. Anything but success raises, naming how to resume (`resume(task)`)."""
    from graph.kernel.errors import Failed, StoreUnavailable, exit_code, from_line
    from graph.transports.cli.common import CliError

    task = k.call(capability, inputs, transport="cli")
    try:
        view = _follow(k, task, not args.json and not args.no_progress and sys.stderr.isatty())
    except KeyboardInterrupt:
        print(
            f"tradegraph: stopping after the current decision point (the {what} resumes with {resume(task)}); "
            f"Ctrl-C again stops at once",
            file=sys.stderr,
        )
        try:
            k.call("cancel_task", {"task_id": task.task_id}, transport="cli")
            k.tasks.join(task.task_id)
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


def _stop_at_once(k, task, wait_s: float = 5.0) -> None:
    """Close the store under the task's thread, so that whatever it waits on ends now, and give it a moment to
    end tidily. The cycle under way then fails on the closed store (its events spooled): the loop logs no such
    cycle as its point's decision, so the resumed run decides that point again."""
    k.store.close()
    k.tasks.join(task.task_id, timeout_s=wait_s)


def _follow(k, task, progress: bool):
    """The task's views until it ends (the SSE stream's source), drawn as run_backtest's own bar."""
    from graph.services.backtest.loop import _Progress

    bar, shown, view = None, 0, task
    try:
        for view in k.watch(task.task_id, poll_s=0.2):
            p = view.progress
            if bar is None and p.total:
                bar = _Progress(p.total, p.done, progress)
                shown = p.done
            while bar is not None and shown < p.done:  # the bar advances one decision point at a time
                bar.update(p.date or "", p.equity or 0.0, p.trades)
                shown += 1
    finally:
        if bar is not None:
            bar.close()
    return view
