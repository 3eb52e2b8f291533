"""What every `tradegraph` command shares: exit codes, the one-line error, opening the store."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_STORE, EXIT_EXECUTED_WITH_ERRORS = 0, 1, 2, 3, 4


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_INPUT):
        super().__init__(message)
        self.code = code


def open_store(uri: Optional[str]):
    from database.connection import StoreUnavailable, connect

    try:
        return connect(uri)
    except StoreUnavailable as e:
        raise CliError(str(e), EXIT_STORE) from None


def parse_window(args) -> list[str]:
    """--symbols, --start and --end as the user typed them, each named in its own one-line error; returns the
    symbols (the kernel checks each against the data)."""
    from agent.data.market import DataError, parse_date
    from graph.machine.runner import InputError, parse_symbols

    try:
        symbols = parse_symbols(args.symbols)
    except InputError as e:
        raise CliError(f"--symbols: {e}") from None
    for name in ("start", "end"):
        try:
            parse_date(getattr(args, name))
        except DataError as e:
            raise CliError(f"--{name}: {e}") from None
    if args.start > args.end:
        raise CliError(f"--start {args.start} is after --end {args.end}")
    return symbols


def add_db_flag(sp) -> None:
    sp.add_argument(
        "--db",
        default=None,
        help="store URI: mongodb://…, mongomock://… (default: $MONGODB_URI, "
        "else the embedded store under $TRADEGRAPH_HOME)",
    )


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, default=str, sort_keys=False))


@contextmanager
def kernel(db: Optional[str], *, needs_store: bool = True, **options: Any) -> Iterator[Any]:
    """A Kernel on the command's store, closed after; a kernel error raised inside becomes its exit code and
    one line. A command with no store to read (features, schemas) opens none."""
    from graph.kernel.core import Kernel
    from graph.kernel.errors import KernelError, exit_code

    store = open_store(db) if needs_store else None
    try:
        yield Kernel(store, **options)
    except KernelError as e:
        raise CliError(e.message + _searched(e, store), exit_code(e)) from None
    finally:
        if store is not None:
            store.close()


def _searched(err, store) -> str:
    """A session not found names the store it was looked for in: another folder or $TRADEGRAPH_HOME may hold it."""
    from graph.kernel.errors import NotFound

    if isinstance(err, NotFound) and err.field == "session_id" and store is not None:
        return f" in the store at {store.location}"
    return ""


def writable_file(flag: str, path: str | None, *, makes_folders: bool = False) -> None:
    """An output file the command will write, checked before it does any work: a folder that does not exist (unless
    the command makes it), is a file, or can't be written to is bad input, one line naming the flag; nothing runs."""
    if path is None:
        return
    if Path(path).expanduser().is_dir():
        raise CliError(f"{flag} {path}: is a folder, not a file")
    _check_folder(flag, path, Path(path).expanduser().parent, makes_folders)


def writable_dir(flag: str, path: str | None) -> None:
    """An output folder the command makes if missing (its parents too): the nearest one that exists must be a
    folder it can write to."""
    if path is not None:
        _check_folder(flag, path, Path(path).expanduser(), True)


def _check_folder(flag: str, given: str, folder: Path, makes_folders: bool) -> None:
    existing = folder
    while makes_folders and not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.exists():
        raise CliError(f"{flag} {given}: folder {folder} does not exist")
    if not existing.is_dir():
        raise CliError(f"{flag} {given}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CliError(f"{flag} {given}: folder {existing} is not writable")


def kernel_call(db: Optional[str], name: str, *, needs_store: bool = True, **args: Any) -> Any:
    """Run a capability through the kernel as the `cli` transport: the same input models, policy and error
    mapping as HTTP and MCP."""
    with kernel(db, needs_store=needs_store) as k:
        return k.call(name, args, transport="cli")


# the command-line attributes that name a run folder's id, for the note about the old ./experiments default
RUN_ID_ARGS = ("run_id", "sweep_id", "resume", "benchmark_id", "target")


def add_runs_flag(p, what: str = "the runs folder") -> None:
    """--out for a command that keeps runs (backtest, sweep, benchmark) or looks them up (audit): unset, the runs
    folder under the home (graph/kernel/runs.py), filled in by main() once the environment is checked."""
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=f"{what} (default: $TRADEGRAPH_RUNS_DIR, else experiments/ in the store's home, the same "
        f"from every folder)",
    )
    p.set_defaults(runs_folder=True)


def resolve_runs_flag(args) -> None:
    """--out left unset becomes the runs folder; a note when the id given is found only in ./experiments."""
    import sys

    from graph.kernel.runs import legacy_note, runs_dir

    if not getattr(args, "runs_folder", False) or args.out is not None:
        return
    args.out = str(runs_dir())
    run_id = next((getattr(args, a) for a in RUN_ID_ARGS if isinstance(getattr(args, a, None), str)), None)
    note = legacy_note(args.out, run_id)
    if note:
        print(f"tradegraph: {note}", file=sys.stderr)
