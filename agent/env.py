"""Settings read from the environment, below agent/config.py and agent/providers.py (both use them, so neither
imports the other for them): the error that names a bad value, a bounded number, the LLM retry policy."""

from __future__ import annotations

import os
from dataclasses import dataclass


class ConfigError(ValueError):
    """A configuration value that can't be used; the message names it."""


def env_number(name: str, default, cast=float, lo=0, hi=float("inf")):
    """A number from the environment; unset or empty is the default, anything unusable is an error naming it."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not {'an integer' if cast is int else 'a number'}") from None
    if not lo <= value <= hi:  # NaN fails this too
        raise ConfigError(f"{name}={raw!r} is outside {lo:g}..{hi:g}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """How tradegraph itself retries a failed LLM call (the SDK's own retries are off, so each attempt
    is audited): 429, 5xx and timeouts, at most `retries` times (seed 002: 3), waiting `backoff_s × 2^(n-1)`
    less up to `jitter` of it, or what the provider's Retry-After asks; never longer than `max_wait_s`."""

    retries: int = 3
    backoff_s: float = 1.0
    jitter: float = 0.5  # fraction of each backoff taken off at random, so parallel callers spread out
    max_wait_s: float = 60.0
    timeout_s: float = 60.0  # per HTTP request

    @classmethod
    def from_env(cls) -> RetryPolicy:
        return cls(
            retries=env_number("TRADEGRAPH_LLM_RETRIES", 3, int, 0, 10),
            backoff_s=env_number("TRADEGRAPH_LLM_BACKOFF_S", 1.0, float, 0, 60),
            jitter=env_number("TRADEGRAPH_LLM_JITTER", 0.5, float, 0, 1),
            max_wait_s=env_number("TRADEGRAPH_LLM_MAX_WAIT_S", 60.0, float, 0, 3600),
            timeout_s=env_number("TRADEGRAPH_LLM_TIMEOUT", 60.0, float, 0.001, 3600),
        )
