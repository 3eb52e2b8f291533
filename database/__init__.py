"""Persistence: audit events, portfolios and the execution ledger on MongoDB (or a stand-in).

Imports only `schemas` from this project.
"""
from database.connection import Store, StoreUnavailable, connect
from database.embedded import server_status, start_server, stop_server
from database.events import DuplicateEventError, EventStore
from database.portfolio import ExecutionLedger, PortfolioStore
from database.writer import BufferedEventWriter

__all__ = [
    "Store", "StoreUnavailable", "connect", "start_server", "stop_server", "server_status",
    "DuplicateEventError", "EventStore", "ExecutionLedger", "PortfolioStore", "BufferedEventWriter",
]
