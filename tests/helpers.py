"""Test helpers: a mongomock store per test and services whose offline model can be scripted to misbehave."""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from agent.config import AgentConfig
from agent.offline_model import OfflineChatModel
from database.connection import connect
from graph.machine.cycle_context import default_services


def mock_store():
    return connect(f"mongomock://t_{uuid.uuid4().hex[:10]}")


def services_with(script: dict | None = None, **config_overrides):
    """Default services whose models (both tiers) share one scripted OfflineChatModel."""
    cfg = AgentConfig(**config_overrides)
    model = OfflineChatModel(model_name="offline-quick", script=script or {})
    return default_services(cfg, model_factory=lambda c, tier: model)


def events_of(store, outcome, kind=None):
    return store.events.read(outcome.session_id, kind=kind)


def audited_attempts(fake, store, out):
    """The guarantee every test shares: each HTTP request is one llm_request with its own llm_response
    carrying the status the server answered (None: no answer in time)."""
    requests = events_of(store, out, "llm_request")
    responses = {e["run_id"]: e["payload"] for e in events_of(store, out, "llm_response")}
    assert len(fake.requests) == len(requests) == len(responses) == out.llm_calls
    assert all(e["run_id"] in responses for e in requests)
    statuses = [responses[e["run_id"]]["http_status"] for e in requests]
    assert sorted(statuses, key=str) == sorted(fake.statuses, key=str)
    return [(e["payload"], responses[e["run_id"]]) for e in requests]


def filled(store, out) -> list:
    entry = store.executions.get(out.cycle_id)
    return (entry or {}).get("result", {}).get("executed_trades") or []


def one_line_error(out) -> str:
    message = out.error["message"]
    assert "\n" not in message and "Traceback" not in message
    return message


@dataclass
class Answer:
    returncode: int
    stdout: str
    stderr: str


def cli_here(argv: list[str], env: dict[str, str] | None = None) -> Answer:
    """The CLI's main(argv) in this process, offline, with env set for the call: its exit code and what it printed.
    For a step whose own process is not what a test checks (a process of its own costs ~2-3 s of imports); the
    `tradegraph` fixture calls this, and fixtures call it directly."""
    import pytest

    from graph.transports.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name, value in {"TRADEGRAPH_LLM": "offline", **(env or {})}.items():
            mp.setenv(name, value)
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse's own refusals and --version
            code = e.code if isinstance(e.code, int) else 2
    return Answer(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def local_ray(workers: int = 2) -> Iterator[None]:
    """A local Ray instance in this process, started as a sweep starts its own, for the sweeps run here to join
    (a sweep joins a Ray its caller initialized); stopped after."""
    import ray

    from graph.services.sweep.driver import start_local_ray

    start_local_ray(workers)
    try:
        yield
    finally:
        ray.shutdown()
