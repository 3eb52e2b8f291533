"""Which execution backend a cycle gets: the simulated book (sim, the default) or a broker, from --broker or
TRADEGRAPH_BROKER; a session that started on a broker stays on it (its approval resumes through the same one)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional

from agent.brokers import BrokerConfigError
from agent.brokers.settings import alpaca_settings, broker_name, fill_wait_s
from agent.config import AgentConfig
from database.broker import BrokerSessions
from database.connection import Store
from graph.machine.execution import PaperExecution


def session_broker(store: Store, session_id: Optional[str]) -> Optional[str]:
    return BrokerSessions(store.db).broker_of(session_id) if session_id else None


def execution_for(
    store: Store,
    config: AgentConfig,
    broker: Optional[str] = None,
    *,
    session_id: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Any:
    env = os.environ if env is None else env
    bound = session_broker(store, session_id)
    name = broker_name(env, broker)
    if bound is not None and broker is None:
        name = bound  # an approval, or a run continuing a session, uses the session's broker
    elif bound is not None and bound != name:
        raise BrokerConfigError(f"session '{session_id}' trades through {bound}, not {name}")
    if name == "sim":
        return PaperExecution(store, config)
    from agent.brokers.alpaca import AlpacaBroker
    from agent.brokers.mandate import load_mandate
    from graph.machine.broker.execution import BrokerExecution

    settings = alpaca_settings(env)
    backend = BrokerExecution(
        store, config, AlpacaBroker(settings), load_mandate(settings.mandate_path), fill_wait_s=fill_wait_s(env)
    )
    if bound is not None:  # read above: the cycle need not bind it again
        backend.bound.add(str(session_id))
    return backend
