"""Every provider path end to end: the real LangChain provider class (ChatAnthropic, ChatOllama, ChatOpenAI against
an OpenAI-compatible server) runs a whole offline-data cycle over HTTP against a local fake of that provider's
wire format, which answers the agent's real prompts with the offline model's rules.

Each case also gets the faults real providers send (a 429 with Retry-After, a 500, a malformed answer, a 400,
a server that is not there), and each test asserts what test_llm_faults asserts for OpenAI: the server received
as many requests as `state_events` holds `llm_request` events, each answered by an `llm_response` carrying the
status the server sent; the cycle completes (a repaired fault) or fails closed, one line, nothing filled.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from agent.config import AgentConfig
from agent.tools import TOOLS
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.replay.session import verify_session
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.fakes.fake_gemini import FakeGemini
from tests.fakes.fake_ollama import FakeOllama
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.provider_fake import FakeProvider, Fault
from tests.helpers import audited_attempts, events_of, filled, mock_store, one_line_error

pytestmark = pytest.mark.integration

SYMBOL, AS_OF = "AAPL", "2012-06-01"  # the honest cycle buys AAPL: a fault that fails it must stop that fill
VARS = (
    "TRADEGRAPH_LLM",
    "TRADEGRAPH_QUICK_MODEL",
    "TRADEGRAPH_DEEP_MODEL",
    "TRADEGRAPH_STRUCTURED_METHOD",
    "TRADEGRAPH_TOOL_CHOICE",
    "TRADEGRAPH_LLM_TIMEOUT",
    "TRADEGRAPH_LLM_RETRIES",
    "TRADEGRAPH_LLM_MAX_WAIT_S",
    "TRADEGRAPH_TOKEN_BUDGET",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_URL",
    "OLLAMA_HOST",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
)


@dataclass(frozen=True)
class Case:
    id: str
    fake: Callable[[], FakeProvider]
    env: Callable[[str], dict[str, str]]  # the fake's base URL -> the variables that select it
    model_class: str
    method: str  # the structured-output method the JSON pass is expected to use
    tool_choice: bool  # whether the JSON pass is expected to force its tool


CASES = [
    Case(
        "anthropic",
        FakeAnthropic,
        lambda url: {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": url,
            "TRADEGRAPH_QUICK_MODEL": "anthropic:claude-haiku-4-5",
            "TRADEGRAPH_DEEP_MODEL": "anthropic:claude-opus-4-5",
        },
        "ChatAnthropic",
        "function_calling",
        True,
    ),
    # LangChain's profile says Claude Sonnet 5.5 refuses a forced tool_choice: native JSON-schema output instead
    Case(
        "anthropic-sonnet-5-5",
        FakeAnthropic,
        lambda url: {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_API_URL": url,
            "TRADEGRAPH_LLM": "anthropic",
            "TRADEGRAPH_QUICK_MODEL": "claude-sonnet-5-5",
            "TRADEGRAPH_DEEP_MODEL": "claude-sonnet-5-5",
        },
        "ChatAnthropic",
        "json_schema",
        False,
    ),
    Case(
        "ollama",
        FakeOllama,
        lambda url: {
            "OLLAMA_HOST": url,
            "TRADEGRAPH_LLM": "ollama",
            "TRADEGRAPH_QUICK_MODEL": "llama3.1:8b",
            "TRADEGRAPH_DEEP_MODEL": "qwen2.5:14b",
        },
        "ChatOllama",
        "json_schema",
        False,
    ),
    Case(
        "ollama-json_mode",
        FakeOllama,
        lambda url: {
            "OLLAMA_HOST": url,
            "TRADEGRAPH_QUICK_MODEL": "ollama:llama3.1:8b",
            "TRADEGRAPH_DEEP_MODEL": "ollama:llama3.1:8b",
            "TRADEGRAPH_STRUCTURED_METHOD": "json_mode",
        },
        "ChatOllama",
        "json_mode",
        False,
    ),
    Case(
        "google_genai",
        FakeGemini,
        lambda url: {
            "GOOGLE_API_KEY": "test-key",
            "GOOGLE_GEMINI_BASE_URL": url,
            "TRADEGRAPH_LLM": "google_genai",
            "TRADEGRAPH_QUICK_MODEL": "gemini-2.5-flash",
            "TRADEGRAPH_DEEP_MODEL": "gemini-2.5-pro",
        },
        "ChatGoogleGenerativeAI",
        "json_schema",
        True,
    ),
    Case(
        "google_genai-function_calling",
        FakeGemini,
        lambda url: {
            "GEMINI_API_KEY": "test-key",
            "GOOGLE_GEMINI_BASE_URL": url,
            "TRADEGRAPH_QUICK_MODEL": "google_genai:gemini-2.5-flash",
            "TRADEGRAPH_DEEP_MODEL": "google_genai:gemini-2.5-pro",
            "TRADEGRAPH_STRUCTURED_METHOD": "function_calling",
        },
        "ChatGoogleGenerativeAI",
        "function_calling",
        True,
    ),
    # LM Studio: a 400 for any request carrying tool_choice; the contract as a tool call, never forced
    Case(
        "openai-compatible-no-tool-choice",
        lambda: FakeOpenAI(reject_tool_choice=True),
        lambda url: {
            "OPENAI_API_KEY": "lm-studio",
            "OPENAI_BASE_URL": url,
            "TRADEGRAPH_LLM": "openai",
            "TRADEGRAPH_QUICK_MODEL": "qwen2.5-7b-instruct",
            "TRADEGRAPH_DEEP_MODEL": "qwen2.5-7b-instruct",
            "TRADEGRAPH_STRUCTURED_METHOD": "function_calling",
        },
        "ChatOpenAI",
        "function_calling",
        False,
    ),
]


def use(monkeypatch, case: Case, url: str) -> None:
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")  # tiny backoff; Retry-After is still honoured
    for name, value in case.env(url).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def provider(request, monkeypatch):
    case: Case = request.param
    with case.fake() as fake:
        use(monkeypatch, case, fake.base_url)
        yield case, fake


def run(store=None):
    store = store or mock_store()
    rt = default_services(AgentConfig.from_env())
    out = run_state_machine(SYMBOL, AS_OF, store=store, services=rt)
    return store, out, rt


def plan_validations(store, out) -> list[dict]:
    return [e["payload"] for e in events_of(store, out, "validation") if e["payload"].get("schema") == "Plan"]


# ---------------------------------------------------------------------------- the honest cycle
def test_a_full_cycle_through_the_real_provider_class(provider):
    case, fake = provider
    store, out, rt = run()
    assert type(rt.model("quick")).__name__ == case.model_class
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    assert len(attempts) > 10 and {s["http_status"] for _, s in attempts} == {200}
    assert {r["attempt"] for r, _ in attempts} == {1}
    assert sum(s["usage"]["total_tokens"] for _, s in attempts) == out.tokens["total_tokens"] > 0
    # the tool pass and the JSON pass never share a call; the tool pass never sends tool_choice
    asked = [fake.read("", body) for body in fake.requests]
    assert any(a.tools for a in asked) and any(a.schema for a in asked)
    assert not [a for a in asked if a.tools and a.schema]
    assert {a.method for a in asked if a.schema} == {case.method}
    assert not [b for b, a in zip(fake.requests, asked) if a.tools and fake.forces_tool(b)]
    forced = [b for b, a in zip(fake.requests, asked) if a.schema and fake.forces_tool(b)]
    assert bool(forced) == (case.tool_choice and case.method == "function_calling")
    manifest = events_of(store, out, "manifest")[0]["payload"]
    assert {t: (m["structured_method"], m["tool_choice"]) for t, m in manifest["models"].items()} == {
        "quick": (case.method, case.tool_choice),
        "deep": (case.method, case.tool_choice),
    }
    assert manifest["model_endpoint_host"] == "127.0.0.1"
    served = len(fake.requests)
    report = verify_session(store, out.session_id)
    assert len(fake.requests) == served  # replay never calls the provider
    assert report.identical, report.first_divergence


# ---------------------------------------------------------------------------- transient faults: retried
def test_a_429_waits_what_retry_after_asks(provider):
    case, fake = provider
    fake.faults = [Fault(status=429, headers={"Retry-After": "1"})]
    started = time.perf_counter()
    store, out, _ = run()
    assert time.perf_counter() - started >= 1.0  # the provider asked for 1 s; the 0.01 s backoff is not used
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    [(req, resp)] = [(r, s) for r, s in attempts if s["error"]]
    assert (resp["http_status"], resp["retry_after_s"], resp["retry_in_s"], resp["retryable"]) == (429, 1.0, 1.0, True)
    assert [r["attempt"] for r, _ in attempts if r["messages"] == req["messages"]] == [1, 2]


def test_a_500_is_retried_with_backoff(provider):
    case, fake = provider
    fake.faults = [Fault(when="tools", status=500)]
    store, out, _ = run()
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    # the first tool pass (the quant's): a JSON pass offered as a function call carries its contract as its one tool
    first = [(r["attempt"], s["http_status"], s.get("retryable")) for r, s in attempts if set(r["tools"]) & set(TOOLS)][
        :2
    ]
    assert first == [(1, 500, True), (2, 200, None)]


# ---------------------------------------------------------------------------- fail closed or repaired
def test_a_malformed_answer_is_repaired(provider):
    case, fake = provider
    fake.faults = [Fault(when="Plan", content='{"objective": "buy", "assets": [')]
    store, out, _ = run()
    assert out.status == "completed" and filled(store, out)
    audited_attempts(fake, store, out)
    vals = plan_validations(store, out)
    assert [v["ok"] for v in vals] == [False, True]


def test_an_answer_missing_fields_is_repaired_quoting_the_error(provider):
    case, fake = provider
    fake.faults = [Fault(when="Plan", content='{"objective": "missing every other field"}')]
    store, out, _ = run()
    assert out.status == "completed"
    audited_attempts(fake, store, out)
    vals = plan_validations(store, out)
    assert [v["ok"] for v in vals] == [False, True] and "assets" in vals[0]["error"]
    # the repair request re-sends the bad answer as plain assistant text (never a tool call left unanswered)
    repaired = fake.read(
        "", fake.requests[[i for i, b in enumerate(fake.requests) if fake.read("", b).schema == "Plan"][1]]
    )
    assert repaired.messages[-2].content == '{"objective": "missing every other field"}'
    assert not repaired.messages[-2].tool_calls


def test_a_400_fails_closed_at_once(provider):
    case, fake = provider
    fake.faults = [Fault(when="json", status=400)]
    store, out, _ = run()
    assert out.status == "failed" and "HTTP 400" in one_line_error(out) and "not retried" in one_line_error(out)
    attempts = audited_attempts(fake, store, out)
    assert [s["http_status"] for _, s in attempts].count(400) == 1
    assert not filled(store, out) and "EXECUTING" not in out.contracts


def test_a_server_that_is_not_there_is_retried_then_named(monkeypatch):
    for case in CASES:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}" + ("/v1" if case.model_class == "ChatOpenAI" else "")
        use(monkeypatch, case, url)
        monkeypatch.setenv("TRADEGRAPH_LLM_RETRIES", "1")
        store, out, _ = run()
        assert out.status == "failed", case.id
        message = one_line_error(out)
        assert f"127.0.0.1:{port}" in message and "2 attempt(s)" in message, (case.id, message)
        responses = [e["payload"] for e in events_of(store, out, "llm_response")]
        assert [(r["http_status"], r["retryable"]) for r in responses] == [(None, True), (None, True)], case.id


def test_gemini_states_its_wait_in_the_error_body_and_it_is_honoured(monkeypatch):
    case = next(c for c in CASES if c.id == "google_genai")
    with FakeGemini() as fake:
        use(monkeypatch, case, fake.base_url)
        fake.retry_delay = "1.5s"  # google.rpc.RetryInfo, no Retry-After header
        fake.faults = [Fault(status=429)]
        started = time.perf_counter()
        store, out, _ = run()
        assert time.perf_counter() - started >= 1.5
        assert out.status == "completed"
        [failed] = [s for _, s in audited_attempts(fake, store, out) if s["error"]]
        assert (failed["http_status"], failed["retry_after_s"], failed["retry_in_s"]) == (429, 1.5, 1.5)
        assert failed["error_type"] == "GoogleRateLimitError"


def test_a_timeout_is_an_audited_attempt_and_is_retried(provider, monkeypatch):
    case, fake = provider
    # 2 s: every other answer of the cycle must land within it, also on a loaded machine (at 0.5 s an ordinary answer
    # delayed by 4 busy test workers on 2 cores was cut off too, one timeout more than this test injects)
    monkeypatch.setenv("TRADEGRAPH_LLM_TIMEOUT", "2")
    fake.faults = [Fault(when="Plan", delay_s=4)]
    store, out, _ = run()
    assert out.status == "completed" and filled(store, out)
    [timed_out] = [s for _, s in audited_attempts(fake, store, out) if s["error"]]
    assert timed_out["http_status"] is None and timed_out["retryable"] is True
    assert "timeout" in (timed_out["error_type"] + timed_out["error"]).lower(), timed_out


# ---------------------------------------------------------------------------- tool_choice, sent only where accepted
def lm_studio(monkeypatch, fake, **extra):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "lm-studio")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    for k, v in extra.items():
        monkeypatch.setenv(k, v)


def test_a_server_rejecting_tool_choice_runs_with_the_defaults(monkeypatch):
    with FakeOpenAI(reject_tool_choice=True) as fake:
        lm_studio(monkeypatch, fake)
        store, out, _ = run()
        assert out.status == "completed" and filled(store, out)
        assert 400 not in fake.statuses and not [b for b in fake.requests if "tool_choice" in b]
        assert {b["response_format"]["type"] for b in fake.requests if b.get("response_format")} == {"json_schema"}


def test_forcing_tool_choice_on_such_a_server_fails_closed_naming_it(monkeypatch):
    """The control for the case above: the same server, told it accepts tool_choice, refuses the JSON pass."""
    with FakeOpenAI(reject_tool_choice=True) as fake:
        lm_studio(monkeypatch, fake, TRADEGRAPH_STRUCTURED_METHOD="function_calling", TRADEGRAPH_TOOL_CHOICE="on")
        store, out, _ = run()
        assert out.status == "failed" and out.error["state"] == "PLANNING"
        message = one_line_error(out)
        assert "HTTP 400" in message and "tool_choice" in message and "not retried" in message
        attempts = audited_attempts(fake, store, out)
        # PLANNING's Plan pass is the cycle's first request (no tool pass before it since pass protocol 3): forced,
        # refused, not retried, and nothing asked after it
        [(json_req, json_resp)] = attempts
        assert (json_req["tools"], json_resp["http_status"]) == (["Plan"], 400)
        assert [b.get("tool_choice") for b in fake.requests] == [{"type": "function", "function": {"name": "Plan"}}]
        assert not filled(store, out)


def test_openai_itself_gets_the_contract_as_a_forced_function(monkeypatch):
    with FakeOpenAI() as fake:
        lm_studio(monkeypatch, fake, TRADEGRAPH_STRUCTURED_METHOD="function_calling", TRADEGRAPH_TOOL_CHOICE="on")
        store, out, _ = run()
        assert out.status == "completed"
        forced = [b["tool_choice"] for b in fake.requests if "tool_choice" in b]
        assert forced and all(
            c["type"] == "function" and [t["function"]["name"] for t in b["tools"]] == [c["function"]["name"]]
            for b, c in zip([b for b in fake.requests if "tool_choice" in b], forced)
        )
        assert {c["function"]["name"] for c in forced} >= {"Plan", "TradeThesis"}
