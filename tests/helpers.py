"""Test helpers: a mongomock store per test and a runtime whose offline model can be scripted to misbehave."""
from __future__ import annotations

import uuid

from agent.config import AgentConfig
from agent.offline_model import OfflineChatModel
from database.connection import connect
from graph.runtime import default_runtime


def mock_store():
    return connect(f"mongomock://t_{uuid.uuid4().hex[:10]}")


def runtime_with(script: dict | None = None, **config_overrides):
    """A default runtime whose models (both tiers) share one scripted OfflineChatModel."""
    cfg = AgentConfig(**config_overrides)
    model = OfflineChatModel(model_name="offline-quick", script=script or {})
    return default_runtime(cfg, model_factory=lambda c, tier: model)


def events_of(store, outcome, kind=None):
    return store.events.read(outcome.session_id, kind=kind)
