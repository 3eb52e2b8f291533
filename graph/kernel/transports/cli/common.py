"""What every `tradegraph` command shares: exit codes, the one-line error, opening the store."""
from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator, Optional

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
    from graph.runner import InputError, parse_symbols

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
    sp.add_argument("--db", default=None, help="store URI: mongodb://…, mongomock://… (default: $MONGODB_URI, "
                                               "else the embedded store under $TRADEGRAPH_HOME)")


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
        raise CliError(e.message, exit_code(e)) from None
    finally:
        if store is not None:
            store.close()


def kernel_call(db: Optional[str], name: str, *, needs_store: bool = True, **args: Any) -> Any:
    """Run a capability through the kernel as the `cli` transport: the same input models, policy and error
    mapping as HTTP and MCP."""
    with kernel(db, needs_store=needs_store) as k:
        return k.call(name, args, transport="cli")
