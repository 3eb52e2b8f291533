"""The real ChatOpenAI path, end to end over HTTP against a local OpenAI-compatible server."""

import pytest

from agent.config import AgentConfig
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.replay.session import verify_session
from tests.helpers import events_of, mock_store

pytestmark = pytest.mark.integration


@pytest.fixture
def fake(openai_server):
    return openai_server


def test_a_key_selects_chatopenai_and_the_wire_keeps_tools_and_json_apart(fake):
    cfg = AgentConfig.from_env()
    assert cfg.provider == "openai"
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=default_services(cfg))
    assert out.status in ("completed", "rejected")
    assert len(fake.requests) == out.llm_calls > 10
    with_tools = [r for r in fake.requests if r.get("tools")]
    with_schema = [r for r in fake.requests if r.get("response_format")]
    assert with_tools and with_schema
    assert not [r for r in fake.requests if r.get("tools") and r.get("response_format")]
    assert {r["response_format"]["type"] for r in with_schema} == {"json_schema"}
    requests = events_of(store, out, "llm_request")
    assert {e["payload"]["model"] for e in requests} == {"gpt-4o-mini"} | (
        {"gpt-4o"} if any(r["model"] == "gpt-4o" for r in fake.requests) else set()
    )
    responses = events_of(store, out, "llm_response")
    assert sum(e["payload"]["usage"]["total_tokens"] for e in responses) == out.tokens["total_tokens"] > 0
    # one HTTP request per attempt: the SDK's own retries are off, and each answer is a provider's 200
    assert {e["payload"]["attempt"] for e in requests} == {1}
    assert {e["payload"]["http_status"] for e in responses} == {200}


def test_a_malformed_provider_answer_is_repaired(fake):
    fake.model.script = {"Plan": ['{"objective": "missing every other field"}']}
    store = mock_store()
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=default_services(AgentConfig.from_env()))
    vals = [e["payload"] for e in events_of(store, out, "validation") if e["payload"].get("schema") == "Plan"]
    assert [v["ok"] for v in vals] == [False, True]
    assert "assets" in vals[0]["error"]


def test_an_openai_recorded_session_verifies_without_the_server(fake):
    store = mock_store()
    cfg = AgentConfig.from_env()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=default_services(cfg))
    served = len(fake.requests)
    report = verify_session(store, out.session_id)
    assert len(fake.requests) == served  # replay never calls the live model
    assert report.identical, report.first_divergence
    assert len(report.cycles) == 1 and report.replay_session_id != out.session_id
