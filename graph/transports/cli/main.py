"""The `tradegraph` command line: the parser built from each command module's `register`, and one place where
an error becomes a line and an exit code."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, Optional

from graph.services.run_files import UnsafeRunPath
from graph.transports import serve_cli
from graph.transports.cli import (
    audit,
    backtest,
    benchmark,
    broker,
    cycle,
    data,
    export,
    features,
    live,
    memory,
    models,
    replay,
    sessions,
    store,
    sweep,
)
from graph.transports.cli.common import (
    EXIT_EXECUTED_WITH_ERRORS,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_STORE,
    CliError,
    open_store,
    resolve_runs_flag,
)
from graph.transports.cli.cycle import cycle_exit_code
from graph.transports.cli.pipe import closed_pipe_tolerated
from graph.transports.gc_tuning import collect_garbage_less_often

__all__ = [
    "main",
    "build_parser",
    "cycle_exit_code",
    "CliError",
    "open_store",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_STORE",
    "EXIT_EXECUTED_WITH_ERRORS",
]

# the order of `tradegraph --help`
COMMANDS = (
    cycle,
    sessions,
    features,
    store,
    serve_cli,
    replay,
    backtest,
    sweep,
    benchmark,
    audit,
    memory,
    models,
    export,
    data,
    broker,
    live,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tradegraph", description="Auditable LLM trading-agent cycles on LangGraph")
    p.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for commands in COMMANDS:
        commands.register(sub)
    return p


class _Version(argparse.Action):
    """--version, its number looked up when asked: importlib.metadata costs every other command ~30 ms of start-up."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"tradegraph {_version()}")  # on stdout, as argparse's own version action prints it
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tradegraph")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed: pip install -e .)"


def _bad_db_flag(args) -> Optional[str]:
    """--db is checked like $MONGODB_URI: a URI no store speaks is bad input (2), not an unreachable store (3)."""
    from database.connection import check_store_uri, redact

    db = getattr(args, "db", None)
    try:
        if db:
            check_store_uri(db, f"--db {redact(db)!r}")
    except ValueError as e:
        return str(e)
    return None


def main(argv: Optional[list[str]] = None) -> int:
    collect_garbage_less_often()
    # a reader that closed the pipe early changes neither the exit code nor prints a traceback (cli/pipe.py)
    with closed_pipe_tolerated():
        code = _main(argv)
    _exit_without_waiting_for_closed_clients()
    return code


def _exit_without_waiting_for_closed_clients() -> None:
    """pymongo joins its monitor threads at exit, each asleep for up to half a second (MIN_HEARTBEAT_INTERVAL)
    before it sees that its client was closed: 0.46 s of `tradegraph sessions`' 1.1 s. The command has closed its
    store by now (cli/common.py kernel()), so that join waits for nothing; the threads are daemons."""
    import atexit

    monitor = sys.modules.get("pymongo.synchronous.monitor")
    if monitor is not None:
        atexit.unregister(monitor._shutdown_resources)


def _main(argv: Optional[list[str]]) -> int:
    args = build_parser().parse_args(argv)
    fn: Callable[[Any], int] = args.fn
    # every command: a bad variable or --db stops it before it opens or writes anything
    problem = serve_cli.startup_error() or _bad_db_flag(args)
    if problem:
        print(f"tradegraph: error: {problem}", file=sys.stderr)
        return EXIT_INPUT
    try:
        resolve_runs_flag(args)  # --out of a command that keeps runs: the runs folder under the home when unset
        return fn(args)
    except CliError as e:
        print(f"tradegraph: error: {e}", file=sys.stderr)
        return e.code
    except UnsafeRunPath as e:  # a link planted in a run folder (graph/services/run_files.py): bad input
        print(f"tradegraph: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
        # a path the command was given (an output file or folder) that can't be used: bad input, one line
        print(f"tradegraph: error: {e.filename or ''}: {e.strerror or type(e).__name__}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt as e:
        # stopping already: a further Ctrl-C would only break the exit's clean-up (pymongo's, atexit) with a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from graph.machine.interrupts import filled_note

        # where a cycle stopped, and whether its orders had filled by then: then its exit is executed_with_errors'
        # own (4), for 130 would let a script run it again as if nothing had executed
        note = filled_note(e)
        print(f"tradegraph: interrupted{f': {e}' if str(e) else ''}{note}", file=sys.stderr)
        return EXIT_EXECUTED_WITH_ERRORS if note else 130
    except Exception as e:  # a crash is one line and a non-zero exit; the cycle's events hold the details
        from database.errors import StoreUnavailable  # here: importing `database` early slows every command

        if isinstance(e, StoreUnavailable):  # the store went away mid-command: one line naming it
            print(f"tradegraph: error: {str(e).splitlines()[0]}", file=sys.stderr)
            return EXIT_STORE
        if os.environ.get("TRADEGRAPH_DEBUG"):
            raise
        print(f"tradegraph: error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
