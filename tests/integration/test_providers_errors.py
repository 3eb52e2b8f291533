"""Each provider's model as tradegraph builds it, and each provider's errors as tradegraph reads them, without a
network: the classes are the real ones (the SDKs' and the LangChain integrations'), the HTTP exchanges are
answered in-process (httpx's MockTransport) or the errors built the way the SDK builds them.

The end-to-end behaviour over HTTP (each fault a real server sends, retried and audited) is test_providers.py.
"""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from agent.config import AgentConfig, RetryPolicy
from agent.llm import describe_failure, make_model, retry_policy_of
from agent.providers import choices_of

ENV = {
    "openai": {"TRADEGRAPH_LLM": "openai", "OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://10.0.0.1:1234/v1"},
    "anthropic": {
        "TRADEGRAPH_LLM": "anthropic",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": "http://10.0.0.2:8080",
        "TRADEGRAPH_QUICK_MODEL": "claude-haiku-4-5",
        "TRADEGRAPH_DEEP_MODEL": "claude-opus-4-5",
    },
    "google_genai": {
        "TRADEGRAPH_LLM": "google_genai",
        "GEMINI_API_KEY": "k",
        "GOOGLE_GEMINI_BASE_URL": "http://10.0.0.3",
        "TRADEGRAPH_QUICK_MODEL": "gemini-2.5-flash",
        "TRADEGRAPH_DEEP_MODEL": "gemini-2.5-pro",
    },
    "ollama": {
        "TRADEGRAPH_LLM": "ollama",
        "OLLAMA_HOST": "http://10.0.0.4:11434",
        "TRADEGRAPH_QUICK_MODEL": "llama3.1:8b",
        "TRADEGRAPH_DEEP_MODEL": "qwen2.5:14b",
    },
}
URL_VAR = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "google_genai": "GOOGLE_GEMINI_BASE_URL",
    "ollama": "OLLAMA_HOST",
}


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for names in ENV.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)


def sdk_retries(model) -> int:
    """The retries the model's SDK would make by itself: each one an HTTP request no callback sees."""
    name = type(model).__name__
    if name == "ChatOllama":  # the ollama client is a plain httpx.Client: it never retries
        transport = model._client._client._transport
        return transport._pool._retries if hasattr(transport, "_pool") else 0
    return model.max_retries


@pytest.mark.parametrize("provider", sorted(ENV))
def test_each_provider_is_built_with_its_sdk_retries_off_and_its_endpoint_explicit(provider, monkeypatch):
    for k, v in ENV[provider].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TRADEGRAPH_LLM_TIMEOUT", "7.5")
    monkeypatch.setenv("TRADEGRAPH_LLM_RETRIES", "5")
    settings = AgentConfig.from_env()
    model = make_model(settings, "deep")
    assert (
        type(model).__name__
        == {
            "openai": "ChatOpenAI",
            "anthropic": "ChatAnthropic",
            "google_genai": "ChatGoogleGenerativeAI",
            "ollama": "ChatOllama",
        }[provider]
    )
    assert sdk_retries(model) == 0
    # tradegraph's one retry loop reads the policy the model carries
    assert retry_policy_of(model) == settings.retry == RetryPolicy(retries=5, timeout_s=7.5)
    choices = choices_of(model)
    assert (
        choices["provider"] == provider
        and choices["endpoint_host"] == ENV[provider][URL_VAR[provider]].split("/")[2].split(":")[0]
    )
    endpoint = {
        "openai": lambda m: m.openai_api_base,
        "anthropic": lambda m: m.anthropic_api_url,
        "google_genai": lambda m: m.base_url,
        "ollama": lambda m: m.base_url,
    }[provider](model)
    assert endpoint == ENV[provider][URL_VAR[provider]]
    timeout = {
        "openai": lambda m: m.request_timeout,
        "anthropic": lambda m: m.default_request_timeout,
        "google_genai": lambda m: m.timeout,
        "ollama": lambda m: m.client_kwargs["timeout"],
    }[provider](model)
    assert timeout == 7.5
    assert getattr(model, "temperature", None) == 0


def test_google_is_the_gemini_api_and_a_vertex_ai_environment_is_refused(monkeypatch):
    from agent.config import ConfigError

    for k, v in ENV["google_genai"].items():
        monkeypatch.setenv(k, v)
    assert make_model(AgentConfig.from_env(), "quick").client.vertexai is False
    # google-genai would silently turn the Gemini API key into a Vertex AI client
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    with pytest.raises(ConfigError, match="GOOGLE_GENAI_USE_VERTEXAI='true'"):
        AgentConfig.from_env()


# ---------------------------------------------------------------------------- errors, provider by provider
REQUEST = httpx.Request("POST", "http://user:pw@10.0.0.9:8080/v1/messages?key=secret")


def anthropic_error(kind: str):
    import anthropic
    import httpx2
    from langchain_anthropic.chat_models import _handle_anthropic_api_error

    request = httpx2.Request("POST", "http://10.0.0.9:8080/v1/messages")

    def status(cls, code, headers=None):
        return cls(f"error {code}", response=httpx2.Response(code, headers=headers or {}, request=request), body=None)

    sdk = {
        "429": lambda: status(anthropic.RateLimitError, 429, {"retry-after": "7"}),
        "529": lambda: status(anthropic.OverloadedError, 529),
        "401": lambda: status(anthropic.AuthenticationError, 401),
        "connection": lambda: anthropic.APIConnectionError(request=request),
        "timeout": lambda: anthropic.APITimeoutError(request=request),
    }[kind]()
    try:  # what ChatAnthropic raises: its LangChain-classified subclass, from the SDK's
        _handle_anthropic_api_error(sdk)
    except Exception as e:  # noqa: BLE001
        return e
    return sdk


def google_error(kind: str):
    from google.genai import errors
    from langchain_google_genai.chat_models import _handle_client_error, _handle_server_error

    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "32s"}
    body = {
        "error": {
            "code": int(kind),
            "message": "quota",
            "status": "RESOURCE_EXHAUSTED",
            "details": [retry_info] if kind == "429" else [],
        }
    }
    try:
        if kind.startswith("5"):
            _handle_server_error(errors.ServerError(int(kind), body, None))
        _handle_client_error(errors.ClientError(int(kind), body, None), {"model": "gemini-2.5-flash"})
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("not raised")


def ollama_error(kind: str):
    """The real ollama client, answered in-process: 429 with Retry-After (seconds or an HTTP date), or no server."""
    import ollama

    def handler(request: httpx.Request) -> httpx.Response:
        if kind == "connection":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if kind == "timeout":
            raise httpx.ReadTimeout("timed out", request=request)
        when = "3" if kind == "429" else email.utils.formatdate(time.time() + 20, usegmt=True)
        return httpx.Response(429, headers={"Retry-After": when}, json={"error": "server busy"})

    client = ollama.Client(host="http://10.0.0.4:11434", transport=httpx.MockTransport(handler))
    try:
        client.chat(model="llama3.1:8b", messages=[{"role": "user", "content": "hi"}], stream=False)
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("not raised")


# (error, http_status, retryable, retry_after_s or a (lo, hi) range, a text the summary must hold)
CASES = {
    "anthropic-429": (lambda: anthropic_error("429"), 429, True, 7.0, "AnthropicRateLimitError"),
    "anthropic-529-overloaded": (lambda: anthropic_error("529"), 529, True, None, "HTTP 529"),
    "anthropic-401": (lambda: anthropic_error("401"), 401, False, None, "HTTP 401"),
    "anthropic-connection": (
        lambda: anthropic_error("connection"),
        None,
        True,
        None,
        "POST http://10.0.0.9:8080/v1/messages",
    ),
    "anthropic-timeout": (lambda: anthropic_error("timeout"), None, True, None, "http://10.0.0.9:8080/v1/messages"),
    "google-429-retryinfo": (lambda: google_error("429"), 429, True, 32.0, "GoogleRateLimitError"),
    "google-503": (lambda: google_error("503"), 503, True, None, "GoogleAPIError"),
    "google-400": (lambda: google_error("400"), 400, False, None, "GoogleInvalidRequestError"),
    "ollama-429": (lambda: ollama_error("429"), 429, True, 3.0, "server busy"),
    "ollama-429-http-date": (lambda: ollama_error("429-date"), 429, True, (18.0, 20.0), "ResponseError"),
    # the ollama client's own message names no server: the summary adds the URL it tried
    "ollama-connection": (lambda: ollama_error("connection"), None, True, None, "POST http://10.0.0.4:11434/api/chat"),
    "ollama-timeout": (lambda: ollama_error("timeout"), None, True, None, "http://10.0.0.4:11434/api/chat"),
    "httpx-credentials-hidden": (
        lambda: httpx.ConnectError("refused", request=REQUEST),
        None,
        True,
        None,
        "POST http://10.0.0.9:8080/v1/messages)",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_providers_errors_are_classified(name):
    make, status, retryable, retry_after, text = CASES[name]
    failure = describe_failure(make())
    assert failure.provider is True
    assert (failure.http_status, failure.retryable) == (status, retryable), failure
    if isinstance(retry_after, tuple):
        assert retry_after[0] <= failure.retry_after_s <= retry_after[1]
    else:
        assert failure.retry_after_s == retry_after
    assert text in failure.summary and "\n" not in failure.summary, failure.summary
    assert "secret" not in failure.summary and "pw" not in failure.summary


def test_tradegraphs_own_errors_are_not_the_providers():
    failure = describe_failure(ValueError("a bug of ours"))
    assert (failure.provider, failure.retryable) == (False, False)


def test_an_error_raised_while_handling_a_providers_failure_is_read_as_that_failure():
    """How the ollama client reports a refused connection: a builtin ConnectionError raised `from None` inside
    its `except httpx.ConnectError`; the chain still holds the provider's failure and its URL."""
    try:
        try:
            raise httpx.ConnectError("refused", request=REQUEST)
        except httpx.ConnectError:
            raise ConnectionError("Failed to connect to Ollama.") from None
    except ConnectionError as e:
        failure = describe_failure(e)
    assert (failure.provider, failure.retryable, failure.url) == (True, True, "POST http://10.0.0.9:8080/v1/messages")
