"""The kill switch: `broker halt [--cancel-open]` and `broker resume`. The halt is a document in the store
(database/broker.py KillSwitch) every process reads before each wave of submits (graph/machine/broker/waves.py: the
wave already under way may still arrive) and every approval reads before resuming a broker cycle; each halt and resume is a `broker_control` event (who, when, why, what was cancelled) in the
`broker-control` session's log."""

from __future__ import annotations

from typing import Any, Optional

from database.broker import KillSwitch
from database.connection import Store
from schemas.events import new_event

CONTROL_SESSION = "broker-control"


def audit_control(store: Store, payload: dict[str, Any]) -> None:
    cycle_id = f"{CONTROL_SESSION}:c{store.events.next_cycle(CONTROL_SESSION)}"
    with store.writer(background=False) as writer:
        writer.put(new_event(CONTROL_SESSION, cycle_id, "BROKER", "broker_control", payload))


def halt(store: Store, *, by: str, reason: str = "", broker: Optional[Any] = None) -> dict[str, Any]:
    """Halt first (no process submits from here on), then cancel what is open at the broker when given one."""
    state = KillSwitch(store.db).set(True, by=by, reason=reason)
    cancelled: list[str] = []
    if broker is not None:
        for o in broker.orders(status="open"):
            if o.client_order_id.startswith("tg-"):
                broker.cancel(o.id)
                cancelled.append(o.client_order_id)
    audit_control(store, {"action": "halt", "by": by, "reason": reason, "cancelled": cancelled})
    return {**state, "cancelled": cancelled}


def resume(store: Store, *, by: str, reason: str = "") -> dict[str, Any]:
    state = KillSwitch(store.db).set(False, by=by, reason=reason)
    audit_control(store, {"action": "resume", "by": by, "reason": reason})
    return {**state, "cancelled": []}
