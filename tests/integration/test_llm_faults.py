"""Every LLM attempt on the record: the real ChatOpenAI path against a local server that misbehaves.

Each test injects one provider fault over HTTP and asserts the exact guarantee: the server received as
many requests as `state_events` holds `llm_request` events, each answered by an `llm_response` carrying
the status the server sent; no traceback escapes; the cycle completes (a repaired fault) or fails
closed with nothing filled.
"""

import email.utils
import json
import time

import pytest

from agent.config import AgentConfig, RetryPolicy
from agent.llm import AttemptPlan, describe_failure, next_wait, parse_retry_after
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.replay.session import verify_session
from tests.fakes.fake_openai import FakeOpenAI, Fault
from tests.helpers import audited_attempts, events_of, filled, mock_store, one_line_error

pytestmark = pytest.mark.integration

SYMBOL, AS_OF = "AAPL", "2012-06-01"  # the honest cycle buys AAPL: a fault that fails it must stop that fill


@pytest.fixture
def fake(monkeypatch):
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")  # tiny backoff; Retry-After is still honoured
        for name in (
            "TRADEGRAPH_LLM",
            "TRADEGRAPH_QUICK_MODEL",
            "TRADEGRAPH_LLM_TIMEOUT",
            "TRADEGRAPH_LLM_RETRIES",
            "TRADEGRAPH_LLM_MAX_WAIT_S",
            "TRADEGRAPH_TOKEN_BUDGET",
        ):
            monkeypatch.delenv(name, raising=False)
        yield server


def run(store=None):
    store = store or mock_store()
    out = run_state_machine(SYMBOL, AS_OF, store=store, services=default_services(AgentConfig.from_env()))
    return store, out


def no_traceback(capfd):
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out


# ---------------------------------------------------------------------------- transient faults: retried
def test_a_429_waits_what_retry_after_asks_and_both_attempts_are_on_the_record(fake, capfd):
    fake.faults = [Fault(status=429, headers={"Retry-After": "1"})]
    started = time.perf_counter()
    store, out = run()
    assert time.perf_counter() - started >= 1.0  # the provider asked for 1 s; the 0.01 s backoff is not used
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    failed = [(req, resp) for req, resp in attempts if resp["error"]]
    assert len(failed) == 1
    req, resp = failed[0]
    assert (resp["http_status"], resp["retry_after_s"], resp["retry_in_s"]) == (429, 1.0, 1.0)
    assert resp["error_type"] == "OpenAIRateLimitError" and resp["retryable"] is True
    retried = [r for r, s in attempts if r["messages"] == req["messages"] and r["attempt"] == 2]
    assert len(retried) == 1 and not [s for r, s in attempts if r is retried[0] and s["error"]]
    no_traceback(capfd)


def test_a_500_then_a_503_are_retried_with_growing_backoff(fake, capfd):
    fake.faults = [Fault(when="tools", status=500), Fault(when="tools", status=503)]
    store, out = run()
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    # the first request offering tools: the quant's tool pass (PLANNING offers none since pass protocol 3)
    quant = [(r["attempt"], s["http_status"], s.get("retry_in_s")) for r, s in attempts if r["tools"]][:3]
    assert [(a, st) for a, st, _ in quant] == [(1, 500), (2, 503), (3, 200)]
    waits = [w for _, _, w in quant]
    assert 0 < waits[0] <= 0.01 and 0.01 < waits[1] <= 0.02 and waits[2] is None  # base × 2^n, minus jitter
    no_traceback(capfd)


def test_a_timeout_is_an_audited_attempt_and_is_retried(fake, capfd, monkeypatch):
    # 2 s: every other answer of the cycle must land within it, also on a loaded machine (at 0.5 s an ordinary answer
    # delayed by 4 busy test workers on 2 cores was cut off too, one timeout more than this test injects)
    monkeypatch.setenv("TRADEGRAPH_LLM_TIMEOUT", "2")
    fake.faults = [Fault(when="Plan", delay_s=4)]
    store, out = run()
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    timed_out = [s for _, s in attempts if s["error"]]
    assert len(timed_out) == 1 and timed_out[0]["http_status"] is None
    assert "Timeout" in timed_out[0]["error_type"] and timed_out[0]["retryable"] is True
    no_traceback(capfd)


# ---------------------------------------------------------------------------- fail closed, audited
def test_retries_exhausted_fail_the_state_closed_naming_the_provider_status(fake, capfd):
    fake.faults = [Fault(status=503) for _ in range(4)]  # seed 002: 1 attempt + at most 3 retries
    store, out = run()
    assert out.status == "failed" and out.error["state"] == "PLANNING"
    assert "HTTP 503" in one_line_error(out) and "4 attempt" in one_line_error(out)
    attempts = audited_attempts(fake, store, out)
    assert [(r["attempt"], s["http_status"]) for r, s in attempts] == [(1, 503), (2, 503), (3, 503), (4, 503)]
    assert attempts[-1][1]["retry_in_s"] is None  # the last one is not retried
    assert not filled(store, out) and "EXECUTING" not in out.contracts
    no_traceback(capfd)


def test_a_401_fails_closed_at_once_without_a_retry(fake, capfd):
    fake.faults = [Fault(status=401)]
    store, out = run()
    assert out.status == "failed" and "HTTP 401" in one_line_error(out) and "not retried" in one_line_error(out)
    [(req, resp)] = audited_attempts(fake, store, out)
    assert resp["retryable"] is False and resp["retry_in_s"] is None
    assert not filled(store, out)
    no_traceback(capfd)


def test_a_400_fails_closed_at_once(fake):
    fake.faults = [Fault(when="json", status=400)]
    store, out = run()
    assert out.status == "failed" and "HTTP 400" in one_line_error(out)
    attempts = audited_attempts(fake, store, out)
    assert [s["http_status"] for _, s in attempts].count(400) == 1
    assert not filled(store, out)


# ---------------------------------------------------------------------------- malformed answers: repaired
def test_malformed_json_content_is_repaired(fake, capfd):
    fake.faults = [Fault(when="Plan", content='{"objective": "buy", "assets": [')]
    store, out = run()
    assert out.status == "completed" and filled(store, out)
    audited_attempts(fake, store, out)
    vals = [e["payload"] for e in events_of(store, out, "validation") if e["payload"].get("schema") == "Plan"]
    assert [v["ok"] for v in vals] == [False, True]
    no_traceback(capfd)


def test_malformed_tool_arguments_are_audited_and_the_model_told(fake, capfd):
    fake.faults = [
        Fault(
            when="tools",
            tool_calls=[
                {
                    "id": "call_bad",
                    "type": "function",
                    "function": {"name": "get_indicators", "arguments": '{"symbol": "AAPL"'},
                }
            ],
        )
    ]
    store, out = run()
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    [bad] = [s for _, s in attempts if s["invalid_tool_calls"]]
    assert bad["invalid_tool_calls"][0]["args"] == '{"symbol": "AAPL"'
    errors = [e["payload"] for e in events_of(store, out, "error") if e["payload"].get("type") == "invalid_tool_call"]
    assert len(errors) == 1 and errors[0]["tool"] == "get_indicators" and errors[0]["state"] == "ANALYZING"
    # the next request carries the model's broken call and an error tool message answering it
    follow_up = next(r for r in fake.requests if any(m.get("tool_call_id") == "call_bad" for m in r["messages"]))
    answer = next(m for m in follow_up["messages"] if m.get("tool_call_id") == "call_bad")
    assert answer["role"] == "tool" and answer["content"].startswith("ERROR") and "JSON" in answer["content"]
    no_traceback(capfd)


def test_an_unknown_tool_is_refused_and_the_model_told(fake, capfd):
    fake.faults = [
        Fault(
            when="tools",
            tool_calls=[
                {"id": "call_x", "type": "function", "function": {"name": "wire_money", "arguments": '{"to": "me"}'}}
            ],
        )
    ]
    store, out = run()
    assert out.status == "completed"
    audited_attempts(fake, store, out)
    refused = [e["payload"] for e in events_of(store, out, "error") if e["payload"].get("type") == "tool_refused"]
    assert [(r["tool"], r["state"]) for r in refused] == [("wire_money", "ANALYZING")]
    assert not [e for e in events_of(store, out, "tool_call") if e["payload"]["name"] == "wire_money"]
    answer = next(m for r in fake.requests for m in r["messages"] if m.get("tool_call_id") == "call_x")
    assert answer["content"].startswith("REFUSED")
    no_traceback(capfd)


def test_a_truncated_json_answer_is_audited_and_repaired(fake, capfd):
    fake.faults = [Fault(when="Plan", content=lambda honest: honest[:60], finish_reason="length")]
    store, out = run()
    assert out.status == "completed" and filled(store, out)
    attempts = audited_attempts(fake, store, out)
    [cut] = [s for r, s in attempts if s["finish_reason"] == "length"]
    assert cut["text"] and len(cut["text"]) == 60 and cut["usage"]["total_tokens"] > 0
    assert sum(s["usage"].get("total_tokens", 0) for _, s in attempts) == out.tokens["total_tokens"]
    vals = [e["payload"] for e in events_of(store, out, "validation") if e["payload"].get("schema") == "Plan"]
    assert [v["ok"] for v in vals] == [False, True] and "length" in vals[0]["error"]
    no_traceback(capfd)


def test_a_truncated_tool_call_is_audited_and_the_model_told(fake, capfd):
    fake.faults = [
        Fault(
            when="tools",
            finish_reason="length",
            tool_calls=[
                {"id": "call_cut", "type": "function", "function": {"name": "get_indicators", "arguments": '{"sess'}}
            ],
        )
    ]
    store, out = run()
    assert out.status == "completed" and filled(store, out)
    audited_attempts(fake, store, out)
    errors = [e["payload"] for e in events_of(store, out, "error") if e["payload"].get("type") == "invalid_tool_call"]
    assert len(errors) == 1 and errors[0]["finish_reason"] == "length" and errors[0]["state"] == "ANALYZING"
    no_traceback(capfd)


def test_a_wrong_ticker_fails_closed_with_no_fill(fake, capfd):
    fake.faults = [Fault(when="TradeThesis", content=lambda honest: honest.replace('"AAPL"', '"MSFT"'))]
    store, out = run()
    assert out.status == "failed" and out.error["state"] == "DECIDING"
    assert "'MSFT'" in one_line_error(out)
    audited_attempts(fake, store, out)
    assert not filled(store, out) and "EXECUTING" not in out.contracts
    no_traceback(capfd)


# ---------------------------------------------------------------------------- replay of a retried session
@pytest.mark.parametrize(
    "faults",
    [
        [Fault(when="Plan", status=503), Fault(when="tools", status=429, headers={"Retry-After": "0"})],
        [Fault(when="Plan", content=lambda honest: honest[:60], finish_reason="length")],
        [
            Fault(
                when="tools",
                tool_calls=[
                    {"id": "call_bad", "type": "function", "function": {"name": "get_portfolio", "arguments": "{"}}
                ],
            )
        ],
    ],
    ids=["retried", "truncated", "malformed-tool-args"],
)
def test_a_session_with_faults_verifies_without_the_server(fake, faults):
    fake.faults = faults
    store, out = run()
    assert out.status == "completed"
    served = len(fake.requests)
    report = verify_session(store, out.session_id)
    assert len(fake.requests) == served
    assert report.identical, report.first_divergence


# ---------------------------------------------------------------------------- the pieces, without a server
def test_retry_after_in_seconds_or_as_an_http_date():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("garbage") is None and parse_retry_after(None) is None
    in_20s = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 18 <= parse_retry_after(in_20s) <= 20
    assert parse_retry_after(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0


def test_a_long_retry_after_is_capped_and_a_non_retryable_error_never_waits():
    import httpx
    import openai

    policy = RetryPolicy(retries=3, backoff_s=0.5, jitter=0.0, max_wait_s=30)
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    limited = openai.RateLimitError(
        "slow down", response=httpx.Response(429, headers={"Retry-After": "3600"}, request=request), body=None
    )
    failure = describe_failure(limited)
    assert (failure.http_status, failure.retryable, failure.retry_after_s) == (429, True, 3600.0)
    assert next_wait(failure, AttemptPlan.of(policy, 1)) == 30  # capped
    assert next_wait(failure, AttemptPlan.of(policy, 4)) is None  # 3 retries used
    denied = openai.AuthenticationError("bad key", response=httpx.Response(401, request=request), body=None)
    assert next_wait(describe_failure(denied), AttemptPlan.of(policy, 1)) is None
    assert AttemptPlan.of(policy, 3).backoff_s == 2.0  # 0.5 × 2²
    assert json.dumps(AttemptPlan.of(policy, 2).as_dict())  # travels in run metadata as plain data
