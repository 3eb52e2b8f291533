"""Agent configuration as a dataclass, overridable from the environment (react-agent style)."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

DEFAULT_RISK_FILE = Path(__file__).with_name("risk_limits.toml")


class ConfigError(ValueError):
    """A configuration value that can't be used; the message names it."""


@dataclass(frozen=True)
class RiskLimits:
    """Deterministic risk-engine limits; defaults are documented in agent/risk_limits.toml."""

    risk_per_trade_pct: float = 1.0
    daily_loss_cap_pct: float = 2.0
    max_notional_pct: float = 25.0
    max_positions: int = 3
    exposure_cap_pct: float = 80.0

    @classmethod
    def load(cls, path: str | Path | None = None) -> "RiskLimits":
        path = Path(path or os.environ.get("TRADEGRAPH_RISK_LIMITS") or DEFAULT_RISK_FILE)
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"risk limits file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"risk limits file {path} is not valid TOML: {e}") from None
        table = raw.get("risk", raw)
        known = {f.name: f.type for f in fields(cls)}
        unknown = set(table) - set(known)
        if unknown:
            raise ConfigError(f"unknown risk limit(s) in {path}: {', '.join(sorted(unknown))}")
        values = {}
        for k, v in table.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"risk limit {k}={v!r} in {path} must be a positive number")
            values[k] = int(v) if k == "max_positions" else float(v)
        return cls(**values)


def _env_number(name: str, default, cast=float, lo=0, hi=float("inf")):
    """A number from the environment; unset or empty is the default, anything unusable is an error naming it."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not {'an integer' if cast is int else 'a number'}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} is outside {lo}..{hi}")
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
    def from_env(cls) -> "RetryPolicy":
        return cls(retries=_env_number("TRADEGRAPH_LLM_RETRIES", 3, int, 0, 10),
                   backoff_s=_env_number("TRADEGRAPH_LLM_BACKOFF_S", 1.0, float, 0, 60),
                   jitter=_env_number("TRADEGRAPH_LLM_JITTER", 0.5, float, 0, 1),
                   max_wait_s=_env_number("TRADEGRAPH_LLM_MAX_WAIT_S", 60.0, float, 0, 3600),
                   timeout_s=_env_number("TRADEGRAPH_LLM_TIMEOUT", 60.0, float, 0.001, 3600))


MEMORY_MODES = ("on", "off", "session")


@dataclass(frozen=True)
class AgentConfig:
    """Everything a cycle needs to know that isn't market data. Built once per command."""

    provider: str = "offline"  # offline | openai
    quick_model: str = "offline-quick"
    deep_model: str = "offline-deep"
    structured_method: str = "json_schema"  # json_schema | json_mode (for servers without json_schema)
    max_repair_retries: int = 2
    max_tool_steps: int = 4
    starting_cash: float = 100_000.0
    fees_bps: float = 1.0
    slippage_bps: float = 2.0
    market: str = "us_equity"
    deep_tier_conviction: float = 0.75
    self_critique_below: float = 0.40
    # per-cycle cap on LLM tokens (prompt + completion); None = no cap
    token_budget: int | None = None
    # tradegraph's own retries of failed LLM calls (429/5xx/timeouts) and the per-request timeout
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    risk: RiskLimits = field(default_factory=RiskLimits)
    # which past notes agents are given: on (every memory known before the cycle's date), session (this
    # session's only: a backtest rerun is then independent of other runs), off (none; memories are still written)
    memory: str = "on"
    memory_top_k: int = 3

    @property
    def parallel_llm(self) -> bool:
        """Threads pay off only for a model that waits on the network."""
        return self.provider != "offline"

    @classmethod
    def from_env(cls, **overrides) -> "AgentConfig":
        env = os.environ
        provider = (env.get("TRADEGRAPH_LLM") or ("openai" if env.get("OPENAI_API_KEY") else "offline")).lower()
        if provider not in ("offline", "openai"):
            raise ConfigError(f"TRADEGRAPH_LLM={provider!r} must be 'offline' or 'openai'")
        quick_default, deep_default = (
            ("gpt-4o-mini", "gpt-4o") if provider == "openai" else ("offline-quick", "offline-deep")
        )
        method = env.get("TRADEGRAPH_STRUCTURED_METHOD", "json_schema")
        if method not in ("json_schema", "json_mode"):
            raise ConfigError(f"TRADEGRAPH_STRUCTURED_METHOD={method!r} must be json_schema or json_mode")
        memory = env.get("TRADEGRAPH_MEMORY", "on")
        if memory not in MEMORY_MODES:
            raise ConfigError(f"TRADEGRAPH_MEMORY={memory!r} must be one of {', '.join(MEMORY_MODES)}")
        values = dict(
            memory=memory,
            memory_top_k=_env_number("TRADEGRAPH_MEMORY_TOP_K", 3, int, 1, 50),
            provider=provider,
            quick_model=env.get("TRADEGRAPH_QUICK_MODEL", quick_default),
            deep_model=env.get("TRADEGRAPH_DEEP_MODEL", deep_default),
            structured_method=method,
            max_repair_retries=_env_number("TRADEGRAPH_MAX_RETRIES", 2, int, 0, 10),
            max_tool_steps=_env_number("TRADEGRAPH_MAX_TOOL_STEPS", 4, int, 1, 20),
            starting_cash=_env_number("TRADEGRAPH_STARTING_CASH", 100_000.0),
            fees_bps=_env_number("TRADEGRAPH_FEES_BPS", 1.0),
            slippage_bps=_env_number("TRADEGRAPH_SLIPPAGE_BPS", 2.0),
            token_budget=_env_number("TRADEGRAPH_TOKEN_BUDGET", 0, int, 0, 10**9) or None,
            retry=RetryPolicy.from_env(),
            risk=RiskLimits.load(),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values["memory"] not in MEMORY_MODES:
            raise ConfigError(f"memory mode {values['memory']!r} must be one of {', '.join(MEMORY_MODES)}")
        return cls(**values)
