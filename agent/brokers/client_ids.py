"""The client_order_id of an order: derived from (session, cycle, symbol, leg), so a retry, a restarted process or
a second approver asks the broker for the same order instead of placing another (Alpaca refuses a duplicate id
with 422 and finds it at GET /v2/orders:by_client_order_id)."""

from __future__ import annotations

import hashlib

PREFIX = "tg-"  # Alpaca allows up to 128 characters; ours are 3 + 32


def client_order_id(session_id: str, cycle_id: str, symbol: str, leg: int) -> str:
    digest = hashlib.sha256(f"{session_id}\x1f{cycle_id}\x1f{symbol}\x1f{leg}".encode()).hexdigest()
    return PREFIX + digest[:32]
