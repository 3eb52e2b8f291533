"""Model factory and the mechanics of a failed LLM call.

The offline deterministic model is the default; a provider's chat model (agent/providers.py) when configured,
built with its SDK's own retries off: a retry inside an SDK is an HTTP request the callbacks never see.
tradegraph retries in agent/passes.py instead, one audited attempt per request; this module says what
a failure was (`describe_failure`, for every provider's errors) and how long to wait before the next attempt
(`next_wait`), so the audit handler and the retry loop read the same failure the same way.
"""

from __future__ import annotations

import email.utils
import functools
import importlib
import os
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Optional

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage

from agent.config import AgentConfig, RetryPolicy
from agent.providers import OFFLINE, build_model, check_ready, choices_of, model_name_of, tier_model

Tier = Literal["quick", "deep"]

# run metadata key carrying an attempt's AttemptPlan (plain data) from the retry loop to the audit handler
ATTEMPT_KEY = "tradegraph_llm_attempt"


def make_model(config: AgentConfig, tier: Tier = "quick") -> BaseChatModel:
    tm = tier_model(config, tier)
    if tm.provider == OFFLINE:
        from agent.offline_model import OfflineChatModel

        return OfflineChatModel(model_name=tm.model)
    check_ready(tm, config.deep_model if tier == "deep" else config.quick_model, os.environ)
    return build_model(tm, config.retry, output_caps=config.output_caps)


def retry_policy_of(model: BaseChatModel) -> RetryPolicy:
    """A provider model carries its configured policy; tradegraph's own models never fail transiently."""
    retry = choices_of(model).get("retry")
    return RetryPolicy(**retry) if retry else RetryPolicy()


class LLMCallFailed(RuntimeError):
    """A provider error that was not retried, or still failed after the last retry: the state fails closed."""


@dataclass(frozen=True)
class AttemptPlan:
    """What one attempt will do if it fails: drawn before the call, so the audit handler (which sees the
    failure first) and the retry loop compute the same wait from the same numbers."""

    attempt: int
    retries_left: int
    backoff_s: float  # exponential, jitter already drawn; used when the provider gives no Retry-After
    max_wait_s: float

    @classmethod
    def of(cls, policy: RetryPolicy, attempt: int) -> AttemptPlan:
        backoff = policy.backoff_s * 2 ** (attempt - 1) * (1 - policy.jitter * random.random())
        return cls(
            attempt=attempt,
            retries_left=max(0, policy.retries + 1 - attempt),
            backoff_s=round(min(backoff, policy.max_wait_s), 6),
            max_wait_s=policy.max_wait_s,
        )

    def as_dict(self) -> dict:
        # asdict's generic deep copy, spelled out: four plain fields, asked for on every LLM attempt
        return {
            "attempt": self.attempt,
            "retries_left": self.retries_left,
            "backoff_s": self.backoff_s,
            "max_wait_s": self.max_wait_s,
        }

    @classmethod
    def from_dict(cls, data: Optional[dict]) -> Optional[AttemptPlan]:
        return cls(**data) if isinstance(data, dict) else None


@dataclass(frozen=True)
class Failure:
    error_type: str
    summary: str  # one line: "HTTP 429 OpenAIRateLimitError: …"; a transport failure names the URL it tried
    provider: bool  # raised by a provider's SDK or its HTTP client (anything else is tradegraph's own: re-raised)
    retryable: bool
    http_status: Optional[int] = None
    retry_after_s: Optional[float] = None
    # a truncated answer (finish_reason "length") the SDK raised on: paid for, and the caller repairs it
    partial: Optional[AIMessage] = None
    url: Optional[str] = None  # "POST http://host/path" of the request that failed, when the error carries it


# (module, class) of every provider SDK's error base, imported only if installed: an integration may raise its
# own class (AnthropicRateLimitError), its SDK's, the HTTP client's (httpx, or its fork httpx2 that the openai,
# anthropic and google-genai SDKs use when installed) or, like the ollama client, a builtin ConnectionError
# raised while handling httpx's: the chain is searched
_PROVIDER_ERRORS = (
    ("openai", "OpenAIError"),
    ("anthropic", "AnthropicError"),
    ("ollama", "ResponseError"),
    ("google.genai.errors", "APIError"),
    ("httpx", "HTTPError"),
    ("httpx2", "HTTPError"),
    ("langchain_core.exceptions", "ModelError"),
)
# connection failures and timeouts: retried like a 5xx
_TRANSIENT_ERRORS = (
    ("openai", "APIConnectionError"),
    ("anthropic", "APIConnectionError"),
    ("httpx", "TransportError"),
    ("httpx2", "TransportError"),
    ("langchain_core.exceptions", "ModelConnectionError"),
    ("langchain_core.exceptions", "ModelTimeoutError"),
)


@functools.cache
def _classes(names: tuple[tuple[str, str], ...]) -> tuple[type, ...]:
    found = []
    for module, name in names:
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass  # a provider's package not installed: its errors can't occur
    return tuple(found)


def _chain(error: Optional[BaseException]) -> Iterator[BaseException]:
    """The error, then what it was raised from or while handling (`raise … from None` keeps the latter)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(seen) < 8:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _status_of(error: BaseException) -> Optional[int]:
    for value in (
        getattr(error, "status_code", None),
        getattr(error, "code", None),
        getattr(getattr(error, "response", None), "status_code", None),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    return None


def _request_of(error: BaseException) -> Optional[str]:
    try:  # httpx raises RuntimeError from `.request` on an error made without one
        request = getattr(error, "request", None) or getattr(getattr(error, "response", None), "request", None)
    except RuntimeError:
        return None
    url = getattr(request, "url", None)
    if url is None:
        return None
    from agent.providers import public_url

    return f"{getattr(request, 'method', 'POST')} {public_url(str(url))}"


def _google_retry_delay(error: BaseException) -> Optional[float]:
    """Gemini states its wait in the error body (google.rpc.RetryInfo retryDelay "32s"), not a header."""
    details = getattr(error, "details", None)
    body = details.get("error", details) if isinstance(details, dict) else None
    for item in (body or {}).get("details") or []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            match = re.fullmatch(r"([0-9.]+)s", str(item.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def describe_failure(error: BaseException) -> Failure:
    import openai

    chain = list(_chain(error))
    status = next((s for s in map(_status_of, chain) if s is not None), None)
    if isinstance(error, (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError)):
        status = 200  # the answer arrived; the SDK refused its finish reason
    retry_after = None
    for e in chain:
        headers = getattr(getattr(e, "response", None), "headers", None) or {}
        retry_after = parse_retry_after(headers.get("retry-after-ms"), scale=0.001)
        if retry_after is None:
            retry_after = parse_retry_after(headers.get("retry-after"))
        if retry_after is None:
            retry_after = _google_retry_delay(e)
        if retry_after is not None:
            break
    provider = any(isinstance(e, _classes(_PROVIDER_ERRORS)) for e in chain)
    transient = any(
        isinstance(e, _classes(_TRANSIENT_ERRORS)) or getattr(e, "is_retryable", False) is True for e in chain
    )
    retryable = provider and (transient or status in (408, 429) or (status is not None and status >= 500))
    # a server refusing the request's structured-output method (llama.cpp's server answers 500 to json_schema):
    # the same request can't succeed, so it is not retried (`tradegraph models check` finds one that works)
    refused_method = status is not None and status >= 500 and bool(_METHOD_REFUSED.search(str(error)))
    retryable = retryable and not refused_method
    url = next((u for u in map(_request_of, chain) if u is not None), None)
    message = " ".join(str(getattr(error, "message", None) or error or type(error).__name__).split())
    message = message if len(message) <= 200 else message[:200] + "…"
    if status is None and url is not None:  # no answer at all: which server it was is the first thing to know
        message += f" ({url})"
    summary = f"{f'HTTP {status} ' if status else ''}{type(error).__name__}: {message}"
    if refused_method:
        summary += " (the server refused the structured-output method: run `tradegraph models check`)"
    partial = _truncated_answer(error) if isinstance(error, openai.LengthFinishReasonError) else None
    return Failure(
        error_type=type(error).__name__,
        summary=summary,
        provider=provider,
        retryable=retryable,
        http_status=status,
        retry_after_s=retry_after,
        partial=partial,
        url=url,
    )


_METHOD_REFUSED = re.compile(
    r"response_format|json_schema|json_object|tool_choice|\btools?\b.*not supported|"
    r"grammar",
    re.IGNORECASE,
)


def _truncated_answer(error: Any) -> AIMessage:
    completion = error.completion
    choice = completion.choices[0]
    usage = completion.usage
    message = AIMessage(
        content=choice.message.content or "",
        response_metadata={"finish_reason": choice.finish_reason, "model_name": completion.model},
    )
    if usage is not None:
        message.usage_metadata = {
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }
    return message


def parse_retry_after(value: Optional[str], scale: float = 1.0) -> Optional[float]:
    """Retry-After as seconds or an HTTP date (RFC 9110); None when absent or unreadable."""
    if value is None:
        return None
    try:
        return max(0.0, float(value) * scale)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, round(when.timestamp() - time.time(), 3))


def next_wait(failure: Failure, plan: AttemptPlan) -> Optional[float]:
    """Seconds to wait before the next attempt, or None: not retryable, or no retry left."""
    if not failure.retryable or plan.retries_left <= 0:
        return None
    if failure.retry_after_s is not None:
        return min(failure.retry_after_s, plan.max_wait_s)
    return plan.backoff_s


def call_failed(failure: Failure, plan: AttemptPlan, model: BaseChatModel) -> LLMCallFailed:
    name = model_name_of(model) or type(model).__name__
    if not failure.retryable:
        return LLMCallFailed(f"LLM call to {name} failed, not retried: {failure.summary}")
    return LLMCallFailed(
        f"LLM call to {name} failed after {plan.attempt} attempt(s) ({plan.attempt - 1} retries): {failure.summary}"
    )
