"""Audit events that only the state code knows about (transitions, contracts, validations, errors).

They travel through LangChain's callback system as custom events, so the one audit handler
that records LLM and tool calls records these too, in the same order, from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from langchain_core.callbacks import CallbackManager, dispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, get_callback_manager_for_config

from schemas.events import EventKind

AUDIT_EVENT = "tradegraph.audit"

# The callback manager each config dispatches to, as dispatch_custom_event builds it (ensure_config, then
# CallbackManager.configure): a 20-symbol decision point emits ~430 events from a few dozen configs, and building
# the manager was half an event's cost. Keyed by the config object itself (held, so its id stays its own); a config
# is never changed in place (LangChain's and ours are copied, never mutated), so its manager is the same each time.
_MANAGERS: OrderedDict[int, tuple[RunnableConfig, CallbackManager]] = OrderedDict()
_MANAGERS_MAX = 64  # a cycle emits from ~15 configs: the last few cycles, and no more of their contexts, stay held
_lock = threading.Lock()


def _manager(config: RunnableConfig) -> CallbackManager | None:
    key = id(config)
    with _lock:
        held = _MANAGERS.get(key)
        if held is not None and held[0] is config:
            _MANAGERS.move_to_end(key)
            return held[1]
    manager = get_callback_manager_for_config(ensure_config(config))
    if manager.parent_run_id is None:
        return None  # outside a run: dispatch_custom_event says so itself
    with _lock:
        _MANAGERS[key] = (config, manager)
        if len(_MANAGERS) > _MANAGERS_MAX:
            _MANAGERS.popitem(last=False)
    return manager


def emit(kind: EventKind, payload: dict[str, Any], config: RunnableConfig | None) -> None:
    """One of the states' own events; its payload is its kind's model in schemas/events.py (checked when read back,
    not here: this is the hot path)."""
    event = {"kind": kind, "payload": payload}
    manager = _manager(config) if config is not None else None
    if manager is None:
        dispatch_custom_event(AUDIT_EVENT, event, config=config)
        return
    manager.on_custom_event(AUDIT_EVENT, event, run_id=manager.parent_run_id)
