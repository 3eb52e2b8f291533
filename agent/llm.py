"""Model factory and the mechanics of a failed LLM call.

The offline deterministic model is the default, ChatOpenAI when configured. The OpenAI SDK's own
retries are off (`max_retries=0`): a retry inside the SDK is an HTTP request the callbacks never see.
tradegraph retries in agent/passes.py instead, one audited attempt per request; this module says what
a failure was (`describe_failure`) and how long to wait before the next attempt (`next_wait`), so the
audit handler and the retry loop read the same failure the same way.
"""
from __future__ import annotations

import email.utils
import functools
import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, Optional

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage

from agent.config import AgentConfig, ConfigError, RetryPolicy

Tier = Literal["quick", "deep"]

# run metadata key carrying an attempt's AttemptPlan (plain data) from the retry loop to the audit handler
ATTEMPT_KEY = "tradegraph_llm_attempt"


def make_model(config: AgentConfig, tier: Tier = "quick") -> BaseChatModel:
    name = config.deep_model if tier == "deep" else config.quick_model
    if config.provider == "offline":
        from agent.offline_model import OfflineChatModel

        return OfflineChatModel(model_name=name)
    if config.provider == "openai":
        if not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError("TRADEGRAPH_LLM=openai needs OPENAI_API_KEY to be set")
        # temperature 0 and a seed: as reproducible as the server allows; replay is the real guarantee
        return _provider_model_class()(
            model=name,
            temperature=0,
            seed=7,
            base_url=os.environ.get("OPENAI_BASE_URL") or None,
            timeout=config.retry.timeout_s,
            max_retries=0,
            retry_policy=config.retry,
        )
    raise ConfigError(f"unknown model provider {config.provider!r}")


@functools.lru_cache(maxsize=1)
def _provider_model_class():
    from langchain_openai import ChatOpenAI

    class ProviderChatOpenAI(ChatOpenAI):
        """ChatOpenAI carrying the cycle's retry policy to the one retry loop (agent/passes.py)."""

        retry_policy: RetryPolicy

    return ProviderChatOpenAI


def retry_policy_of(model: BaseChatModel) -> RetryPolicy:
    """A provider model carries its configured policy; tradegraph's own models never fail transiently."""
    return getattr(model, "retry_policy", None) or RetryPolicy()


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
    def of(cls, policy: RetryPolicy, attempt: int) -> "AttemptPlan":
        backoff = policy.backoff_s * 2 ** (attempt - 1) * (1 - policy.jitter * random.random())
        return cls(attempt=attempt, retries_left=max(0, policy.retries + 1 - attempt),
                   backoff_s=round(min(backoff, policy.max_wait_s), 6), max_wait_s=policy.max_wait_s)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Optional[dict]) -> Optional["AttemptPlan"]:
        return cls(**data) if isinstance(data, dict) else None


@dataclass(frozen=True)
class Failure:
    error_type: str
    summary: str  # one line: "HTTP 429 OpenAIRateLimitError: …"
    provider: bool  # raised by the provider's SDK (anything else is tradegraph's own error: re-raised as is)
    retryable: bool
    http_status: Optional[int] = None
    retry_after_s: Optional[float] = None
    # a truncated answer (finish_reason "length") the SDK raised on: paid for, and the caller repairs it
    partial: Optional[AIMessage] = None


def describe_failure(error: BaseException) -> Failure:
    import openai

    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) else None
    if isinstance(error, (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError)):
        status = 200  # the answer arrived; the SDK refused its finish reason
    headers = getattr(getattr(error, "response", None), "headers", None) or {}
    retry_after = parse_retry_after(headers.get("retry-after-ms"), scale=0.001)
    if retry_after is None:
        retry_after = parse_retry_after(headers.get("retry-after"))
    provider = isinstance(error, openai.OpenAIError)
    retryable = provider and (isinstance(error, openai.APIConnectionError)  # timeouts included
                              or status in (408, 429) or (status is not None and status >= 500))
    message = " ".join(str(getattr(error, "message", None) or error).split())
    message = message if len(message) <= 200 else message[:200] + "…"
    summary = f"{f'HTTP {status} ' if status else ''}{type(error).__name__}: {message}"
    partial = _truncated_answer(error) if isinstance(error, openai.LengthFinishReasonError) else None
    return Failure(error_type=type(error).__name__, summary=summary, provider=provider, retryable=retryable,
                   http_status=status, retry_after_s=retry_after, partial=partial)


def _truncated_answer(error: Any) -> AIMessage:
    completion = error.completion
    choice = completion.choices[0]
    usage = completion.usage
    message = AIMessage(content=choice.message.content or "",
                        response_metadata={"finish_reason": choice.finish_reason, "model_name": completion.model})
    if usage is not None:
        message.usage_metadata = {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
                                  "total_tokens": usage.total_tokens}
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
    name = getattr(model, "model_name", None) or type(model).__name__
    if not failure.retryable:
        return LLMCallFailed(f"LLM call to {name} failed, not retried: {failure.summary}")
    return LLMCallFailed(f"LLM call to {name} failed after {plan.attempt} attempt(s) "
                         f"({plan.attempt - 1} retries): {failure.summary}")
