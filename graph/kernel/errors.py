"""The kernel's five error kinds, and the ONE place where today's exceptions are mapped onto them.

Every transport maps a kind the same way (the table below): the CLI to an exit code, HTTP to a status,
MCP to a one-line tool error. A message is always one line and names the bad field or value.
"""

from __future__ import annotations

from typing import Any, Optional


class KernelError(Exception):
    kind = "failed"

    def __init__(self, message: str, *, field: Optional[str] = None):
        # one line, always: a transport shows it as is
        line = (str(message).strip().splitlines() or [type(self).__name__])[0]
        super().__init__(line[:500])
        self.message, self.field = line[:500], field

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.kind, "message": self.message, "field": self.field}


class BadInput(KernelError):
    kind = "bad_input"


class NotFound(KernelError):
    kind = "not_found"


class Conflict(KernelError):
    """The request is well-formed but the resource's state refuses it (nothing pending, moved on, running)."""

    kind = "conflict"


class Forbidden(Conflict):
    """Refused by this transport's policy (a setting names how to allow it); a Conflict for the CLI."""

    kind = "forbidden"


class Unauthorized(Forbidden):
    """A network transport's caller without the configured bearer token (never raised in-process)."""

    kind = "unauthorized"


class StoreUnavailable(KernelError):
    kind = "store_unavailable"


class Failed(KernelError):
    kind = "failed"


class ExecutedWithErrors(Failed):
    """A cycle that crashed after EXECUTING's orders filled (its log ends `executed_with_errors`): never reported as
    a plain failure, which a caller may answer by running the cycle again."""

    kind = "executed_with_errors"


# kind -> (CLI exit code, HTTP status): the same for every capability
ERROR_TABLE: dict[type[KernelError], tuple[int, int]] = {
    BadInput: (2, 422),
    NotFound: (2, 404),
    Unauthorized: (2, 401),
    Forbidden: (2, 403),
    Conflict: (2, 409),
    StoreUnavailable: (3, 503),
    ExecutedWithErrors: (4, 500),
    Failed: (1, 500),
}


# kind -> class: an error sent as its kind (an HTTP body, a task's `kind: message`) is rebuilt as itself
BY_KIND: dict[str, type[KernelError]] = {cls.kind: cls for cls in ERROR_TABLE}


def from_line(line: str) -> KernelError:
    """A `kind: message` line (how a task records why it failed) back into its kernel error."""
    kind, sep, message = str(line).partition(": ")
    cls = BY_KIND.get(kind) if sep else None
    return cls(message) if cls is not None else Failed(line)


def exit_code(err: KernelError) -> int:
    return _row(err)[0]


def http_status(err: KernelError) -> int:
    return _row(err)[1]


def _row(err: KernelError) -> tuple[int, int]:
    for cls in type(err).__mro__:  # a subclass's row first (Forbidden before its base Conflict)
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return ERROR_TABLE[Failed]


def validation_line(exc: Any) -> tuple[str, Optional[str]]:
    """A pydantic ValidationError as one line naming the first bad field and the value given."""
    errs = exc.errors()
    if not errs:
        return str(exc), None
    e = errs[0]
    loc = [str(p) for p in e.get("loc", ())]
    # FastAPI prefixes where the value came from; the field is what follows (the whole body if nothing does)
    field = ".".join(p for p in loc if p not in ("body", "query", "path", "header")) or (loc[0] if loc else None)
    got = e.get("input")
    shown = "" if e.get("type") == "missing" else f" (got {_short(got)})"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{field or 'input'}: {e.get('msg')}{shown}{more}", field


def _short(v: Any, n: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= n else text[:n] + "…"


def translate(exc: BaseException) -> KernelError:
    """Today's exceptions -> a kernel error. Imports are local: the mapping must not load the graph."""
    if isinstance(exc, KernelError):
        return exc
    from pydantic import ValidationError
    from pymongo.errors import ConnectionFailure, PyMongoError, ServerSelectionTimeoutError

    from agent.config import ConfigError
    from agent.data.market import DataError
    from database.errors import StoreUnavailable as DbStoreUnavailable
    from database.portfolio import PortfolioConflict
    from graph.machine.runner import ApprovalConflict, InputError, NothingPending, SessionNotFound
    from graph.services.backtest.loop import BacktestError
    from graph.services.replay.session import SchemaVersionMismatch

    text = str(exc)
    if isinstance(exc, SessionNotFound):
        return NotFound(text, field="session_id")
    if isinstance(exc, (NothingPending, ApprovalConflict, PortfolioConflict, SchemaVersionMismatch)):
        return Conflict(text)
    from graph.services.run_files import UnsafeRunPath

    if isinstance(exc, (InputError, DataError, UnsafeRunPath)):
        return BadInput(text)
    if isinstance(exc, BacktestError):
        # a run id reused with another config, or a log that no longer matches it: the run exists
        if "already exists" in text or "does not match" in text:
            return Conflict(text, field="run_id")
        return BadInput(text)
    from graph.services.sweep.driver import SweepError
    from graph.services.sweep.grid import GridError
    from graph.services.sweep.results import GridChanged

    if isinstance(exc, (GridError, SweepError)):
        return BadInput(text)
    if isinstance(exc, GridChanged):
        return Conflict(text, field="sweep_id")
    if isinstance(exc, ValidationError):
        line, field = validation_line(exc)
        return BadInput(line, field=field)
    if isinstance(exc, DbStoreUnavailable):
        return StoreUnavailable(text)
    if isinstance(exc, (ServerSelectionTimeoutError, ConnectionFailure)):
        return StoreUnavailable(f"store unavailable: {type(exc).__name__}: {text.split(', Timeout:')[0]}")
    if isinstance(exc, PyMongoError):
        return Failed(f"store error: {type(exc).__name__}: {text}")
    if isinstance(exc, ConfigError):
        return Failed(f"server configuration: {text}")
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    from graph.machine.interrupts import filled_note

    # the runner's note: the cycle crashed after its orders filled
    return ExecutedWithErrors(line + note) if (note := filled_note(exc)) else Failed(line)
