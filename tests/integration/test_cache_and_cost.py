"""Dollars per call, per state and per cycle against the local OpenAI server; an unknown model's cost is unknown;
a server that reports no usage is counted by estimate."""

import pytest

from agent.config import AgentConfig
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.transports.cli.render import print_cycle
from tests.fakes.fake_openai import FakeOpenAI
from tests.helpers import events_of, mock_store

pytestmark = pytest.mark.integration


def _serve(monkeypatch, server, model=None):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    for var in ("TRADEGRAPH_LLM", "TRADEGRAPH_QUICK_MODEL", "TRADEGRAPH_DEEP_MODEL", "TRADEGRAPH_PRICES"):
        monkeypatch.delenv(var, raising=False)
    if model:
        monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", f"openai:{model}")
        monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", f"openai:{model}")


def _run(store):
    return run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=default_services(AgentConfig.from_env()))


def test_each_call_is_priced_and_the_cycle_adds_them_up_by_state(monkeypatch, capsys):
    with FakeOpenAI() as server:
        _serve(monkeypatch, server)
        store = mock_store()
        out = _run(store)
    responses = [e["payload"] for e in events_of(store, out, "llm_response")]
    assert responses and all(p["cost_usd"] > 0 and p["priced_as"] in ("gpt-4o-mini", "gpt-4o") for p in responses)
    assert all(p["usage"]["estimated"] is False for p in responses)
    assert out.cost["usd"] == pytest.approx(sum(p["cost_usd"] for p in responses))
    assert out.cost["calls"] == out.llm_calls == len(responses)
    assert out.cost["usd"] == pytest.approx(sum(s["usd"] for s in out.cost["by_state"].values()))
    assert {"PLANNING", "ANALYZING", "DECIDING"} <= set(out.cost["by_state"])
    assert out.cost["total_tokens"] == out.tokens["total_tokens"]
    print_cycle(out)
    screen = capsys.readouterr().out
    assert "LLM spend by state" in screen and f"cost: ${out.cost['usd']:.4f}" in screen


def test_an_unknown_model_is_shown_as_unknown_never_zero(monkeypatch, capsys):
    with FakeOpenAI() as server:
        _serve(monkeypatch, server, model="my-local-model")
        out = _run(mock_store())
    assert out.cost["unknown_cost_calls"] == out.cost["calls"] > 0 and out.cost["usd"] == 0.0
    print_cycle(out)
    assert "cost: unknown" in capsys.readouterr().out


def test_a_server_without_usage_is_counted_by_estimate(monkeypatch):
    with FakeOpenAI(report_usage=False) as server:
        _serve(monkeypatch, server)
        store = mock_store()
        out = _run(store)
    responses = [e["payload"] for e in events_of(store, out, "llm_response")]
    assert all(p["usage"]["estimated"] is True and p["usage"]["input_tokens"] > 0 for p in responses)
    assert out.cost["estimated_calls"] == out.cost["calls"] > 0 and out.cost["usd"] > 0
