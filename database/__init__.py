"""Persistence: audit events, portfolios and the execution ledger on MongoDB (or a stand-in).

Imports only `schemas` from this project. The names below load their module when first used (PEP 562), so that
importing `database.errors` or `database.embedded` does not load pymongo and every collection's code: a CLI
command that never opens a store (`--version`, `--help`) starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from database.connection import Store, StoreUnavailable, connect
    from database.embedded import server_status, start_server, stop_server
    from database.events import DuplicateEventError, EventStore
    from database.portfolio import ExecutionLedger, PortfolioStore
    from database.writer import BufferedEventWriter

_WHERE = {
    "Store": "connection",
    "StoreUnavailable": "connection",
    "connect": "connection",
    "server_status": "embedded",
    "start_server": "embedded",
    "stop_server": "embedded",
    "DuplicateEventError": "events",
    "EventStore": "events",
    "ExecutionLedger": "portfolio",
    "PortfolioStore": "portfolio",
    "BufferedEventWriter": "writer",
}

__all__ = [
    "Store",
    "StoreUnavailable",
    "connect",
    "start_server",
    "stop_server",
    "server_status",
    "DuplicateEventError",
    "EventStore",
    "ExecutionLedger",
    "PortfolioStore",
    "BufferedEventWriter",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'database' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"database.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
