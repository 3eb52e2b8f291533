"""Errors every part of `database` may raise; one module so that none imports another for them."""

from __future__ import annotations


class StoreUnavailable(RuntimeError):
    """The store could not be reached, started or written; the message names the (redacted) URI and the cause."""


class AuditSpooled(StoreUnavailable):
    """The store stopped taking audit events; they are safe in a local spool file, waiting for redelivery."""

    def __init__(self, message: str, *, spool_path: str | None, spooled: int):
        super().__init__(message)
        self.spool_path, self.spooled = spool_path, spooled
