"""Agent configuration as a dataclass, overridable from the environment (react-agent style)."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from agent.env import ConfigError, RetryPolicy
from agent.env import env_number as _env_number
from agent.input_window import TRADEGRAPH, InputWindow
from agent.output_caps import caps_from_env
from agent.output_caps import default_text as default_caps_text
from schemas.base import NonNegMoney

DEFAULT_RISK_FILE = Path(__file__).with_name("risk_limits.toml")


@dataclass(frozen=True)
class RiskLimits:
    """Deterministic risk-engine limits; defaults are documented in agent/risk_limits.toml."""

    risk_per_trade_pct: float = 1.0
    daily_loss_cap_pct: float = 2.0
    max_notional_pct: float = 25.0
    max_positions: int = 3
    exposure_cap_pct: float = 80.0

    @classmethod
    def load(cls, path: str | Path | None = None) -> RiskLimits:
        raw = os.environ.get("TRADEGRAPH_RISK_LIMITS") if path is None else None
        try:
            return cls._read(Path(path or raw or DEFAULT_RISK_FILE))
        except ConfigError as e:
            if raw:  # the file came from the environment: say which variable named it
                raise ConfigError(f"TRADEGRAPH_RISK_LIMITS={raw!r}: {e}") from None
            raise

    @classmethod
    def _read(cls, path: Path) -> RiskLimits:
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"risk limits file not found: {path}") from None
        except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
            raise ConfigError(f"risk limits file {path} can't be read: {type(e).__name__}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"risk limits file {path} is not valid TOML: {str(e).splitlines()[0]}") from None
        table = raw.get("risk", raw)
        known = {f.name: f.type for f in fields(cls)}
        unknown = set(table) - set(known)
        if unknown:
            raise ConfigError(f"unknown risk limit(s) in {path}: {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for k, v in table.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"risk limit {k}={v!r} in {path} must be a positive number")
            values[k] = int(v) if k == "max_positions" else float(v)
        return cls(**values)


def _token_budget():
    """TRADEGRAPH_MAX_TOKENS, or its older name TRADEGRAPH_TOKEN_BUDGET: one limit, so two different values are
    an error rather than a silent choice."""
    new = _env_number("TRADEGRAPH_MAX_TOKENS", 0, int, 0, 10**9)
    old = _env_number("TRADEGRAPH_TOKEN_BUDGET", 0, int, 0, 10**9)
    if new and old and new != old:
        raise ConfigError(f"TRADEGRAPH_MAX_TOKENS={new} and TRADEGRAPH_TOKEN_BUDGET={old} disagree: set one")
    return new or old or None


SWITCH = {"on": True, "1": True, "true": True, "off": False, "0": False, "false": False}


def _env_switch(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.strip().lower() not in SWITCH:
        raise ConfigError(f"{name}={raw!r} must be on or off")
    return SWITCH[raw.strip().lower()]


def _upper_bound(annotated) -> float:
    """The upper limit a schemas/ type puts on a number, so a setting is checked against the same limit."""
    for info in getattr(annotated, "__metadata__", ()):
        for c in getattr(info, "metadata", ()):
            for attr in ("lt", "le"):
                if getattr(c, attr, None) is not None:
                    return getattr(c, attr)
    raise TypeError(f"{annotated} has no upper bound")


MEMORY_MODES = ("on", "off", "session")
# bounds of the numeric settings: a broker cost of 10% per side is already far past any real market's
COST_BPS_MAX = 1000.0
# a session's cash must fit a portfolio snapshot (schemas/base.py NonNegMoney, an exclusive bound)
CASH_MAX = math.nextafter(_upper_bound(NonNegMoney), 0)
DEBUG_ON = ("1", "true", "yes", "on")
# TRADEGRAPH_AUDIT_KEY: the shortest HMAC key taken. RFC 2104 discourages keys shorter than the hash's output (32
# bytes for SHA-256); a shorter one is refused outright below 16, where it reads more like a password than a key
AUDIT_KEY_MIN = 16


@dataclass(frozen=True)
class AgentConfig:
    """Everything a cycle needs to know that isn't market data. Built once per command."""

    # the provider of a tier whose model name has no `provider:` prefix: offline | openai | anthropic |
    # google_genai | ollama (agent/providers.py)
    provider: str = "offline"
    quick_model: str = "offline-quick"  # `provider:model` or a name of `provider`'s
    deep_model: str = "offline-deep"
    # auto (each provider's own: agent/providers.py) | json_schema | json_mode | function_calling
    structured_method: str = "auto"
    # whether the JSON pass may force its tool with tool_choice (function_calling): auto (per provider) | on | off
    tool_choice: str = "auto"
    # the sampling temperature every provider tier is sent; None: tradegraph's 0 (as reproducible as the server
    # allows). A StockBench run of a real model sets its protocol's 0.7 (graph/services/benchmark/stockbench/)
    temperature: Optional[float] = None
    max_repair_retries: int = 2
    max_tool_steps: int = 4
    starting_cash: float = 100_000.0
    fees_bps: float = 1.0
    slippage_bps: float = 2.0
    market: str = "us_equity"
    # when a cycle dated D decides (agent/markets.py): at D's close on its whole bar (the default), or at D's open
    # on the bars through the previous close and D's opening price, which it also fills at (StockBench)
    decide_at: str = "close"
    deep_tier_conviction: float = 0.75
    self_critique_below: float = 0.40
    # per-cycle (a backtest: per-run) caps on LLM spending, each checked before the call that would cross it
    # (agent/budget.py); None = no cap. token_budget is prompt + completion tokens, max_cost US dollars
    token_budget: int | None = None
    max_cost: float | None = None
    max_llm_calls: int | None = None
    # reuse a provider's answer to an identical request (agent/cache.py); never for the offline model
    llm_cache: bool = True
    # tradegraph's own retries of failed LLM calls (429/5xx/timeouts) and the per-request timeout
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    risk: RiskLimits = field(default_factory=RiskLimits)
    # which past notes agents are given: session (this session's only, the default: a run's result depends on its
    # inputs and its own history, never on other runs in the store), on (every memory known before the cycle's date,
    # whatever run wrote it: asked for explicitly), off (none; memories are still written)
    memory: str = "session"
    memory_top_k: int = 3
    # how much news and past a cycle is shown (agent/input_window.py): tradegraph's window, or the StockBench
    # protocol's (5 headlines from the 48 hours before the decision, notes from the last 7 days), which only a
    # StockBench run sets; no variable sets it
    input_window: InputWindow = TRADEGRAPH
    # "STATE=tokens,…": the output cap of every request a provider model is sent (agent/output_caps.py): from the
    # contracts, TRADEGRAPH_MAX_OUTPUT_TOKENS and TRADEGRAPH_MAX_OUTPUT_TOKENS_<STATE>
    output_caps: str = field(default_factory=default_caps_text)

    @property
    def parallel_llm(self) -> bool:
        """Threads pay off only for a model that waits on the network."""
        from agent.providers import OFFLINE, split_model

        return any((split_model(name)[0] or self.provider) != OFFLINE for name in (self.quick_model, self.deep_model))

    @classmethod
    def from_env(cls, **overrides) -> AgentConfig:
        """The configuration from the environment; a value that can't be used, or a provider whose package or
        key is missing, raises ConfigError naming the variable (and the extra to install)."""
        from agent import providers
        from agent.decision_time import DECIDE_AT

        env = os.environ
        quick, deep = env.get("TRADEGRAPH_QUICK_MODEL") or None, env.get("TRADEGRAPH_DEEP_MODEL") or None
        for tier, name in (("quick", quick), ("deep", deep)):
            if name is not None and not providers.split_model(name)[1].strip():
                raise ConfigError(f"{providers.TIER_VARS[tier]}={name!r} names no model")
        provider = providers.default_provider(env.get("TRADEGRAPH_LLM") or None, quick, deep, env)
        method = env.get("TRADEGRAPH_STRUCTURED_METHOD") or "auto"
        if method not in ("auto", *providers.STRUCTURED_METHODS):
            raise ConfigError(
                f"TRADEGRAPH_STRUCTURED_METHOD={method!r} must be one of "
                f"{', '.join(('auto', *providers.STRUCTURED_METHODS))}"
            )
        tool_choice = env.get("TRADEGRAPH_TOOL_CHOICE") or "auto"
        if tool_choice not in providers.TOOL_CHOICE_SETTINGS:
            raise ConfigError(
                f"TRADEGRAPH_TOOL_CHOICE={tool_choice!r} must be one of {', '.join(providers.TOOL_CHOICE_SETTINGS)}"
            )
        decide_at = env.get("TRADEGRAPH_DECIDE_AT") or "close"
        if decide_at not in DECIDE_AT:
            raise ConfigError(f"TRADEGRAPH_DECIDE_AT={decide_at!r} must be one of {', '.join(DECIDE_AT)}")
        memory = env.get("TRADEGRAPH_MEMORY") or "session"
        if memory not in MEMORY_MODES:
            raise ConfigError(f"TRADEGRAPH_MEMORY={memory!r} must be one of {', '.join(MEMORY_MODES)}")
        values = dict(
            decide_at=decide_at,
            memory=memory,
            memory_top_k=_env_number("TRADEGRAPH_MEMORY_TOP_K", 3, int, 1, 50),
            provider=provider,
            quick_model=quick,
            deep_model=deep,
            structured_method=method,
            tool_choice=tool_choice,
            max_repair_retries=_env_number("TRADEGRAPH_MAX_RETRIES", 2, int, 0, 10),
            max_tool_steps=_env_number("TRADEGRAPH_MAX_TOOL_STEPS", 4, int, 1, 20),
            starting_cash=_env_number("TRADEGRAPH_STARTING_CASH", 100_000.0, float, 0.01, CASH_MAX),
            fees_bps=_env_number("TRADEGRAPH_FEES_BPS", 1.0, float, 0, COST_BPS_MAX),
            slippage_bps=_env_number("TRADEGRAPH_SLIPPAGE_BPS", 2.0, float, 0, COST_BPS_MAX),
            token_budget=_token_budget(),
            max_cost=_env_number("TRADEGRAPH_MAX_COST", 0.0, float, 0, 1e9) or None,
            max_llm_calls=_env_number("TRADEGRAPH_MAX_LLM_CALLS", 0, int, 0, 10**9) or None,
            llm_cache=_env_switch("TRADEGRAPH_LLM_CACHE", True),
            output_caps=caps_from_env(),
            retry=RetryPolicy.from_env(),
            risk=RiskLimits.load(),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values["decide_at"] not in DECIDE_AT:
            raise ConfigError(f"decision time {values['decide_at']!r} must be one of {', '.join(DECIDE_AT)}")
        check_memory_mode(values["memory"])
        for tier, defaulted in zip(("quick", "deep"), providers.default_models(provider) or (None, None)):
            key = f"{tier}_model"
            if values[key] is None:
                if defaulted is None:
                    var = providers.TIER_VARS[tier]
                    raise ConfigError(
                        f"{var} is unset and {provider} has no default model: name one, e.g. {var}={provider}:<model>"
                    )
                values[key] = defaulted
        settings = cls(**values)
        for tier in ("quick", "deep"):
            name = settings.deep_model if tier == "deep" else settings.quick_model
            # no model profile here: start-up checks import no provider package
            providers.check_ready(providers.tier_model(settings, tier, env, with_profile=False), name, env)
        return settings


def check_memory_mode(mode: str) -> None:
    if mode not in MEMORY_MODES:
        raise ConfigError(f"memory mode {mode!r} must be one of {', '.join(MEMORY_MODES)}")


# the configuration a command parsed (check_environment, at its start) and what it was parsed from
_parsed: dict[str, Any] = {}
_parsed_lock = threading.Lock()


def _parsed_from() -> tuple:
    """What a parse reads: the environment and the risk limits file it names (its size and time of change)."""
    path = Path(os.environ.get("TRADEGRAPH_RISK_LIMITS") or DEFAULT_RISK_FILE)
    risk: tuple[str, Optional[int], Optional[int]]
    try:
        stat = path.stat()
        risk = (str(path), stat.st_mtime_ns, stat.st_size)
    except OSError:
        risk = (str(path), None, None)
    return tuple(sorted(os.environ.items())), risk


def _parse() -> AgentConfig:
    settings = AgentConfig.from_env()
    with _parsed_lock:
        _parsed.update(source=_parsed_from(), settings=settings)
    return settings


def command_config(memory: Optional[str] = None) -> AgentConfig:
    """The command's configuration, parsed from the environment once per process and command: check_environment
    parses it as the command starts, and the CLI and the kernel's runtimes take that one; parsed again only when the
    environment or the risk limits file changed since (a test, a server whose environment moved). `memory`
    overrides the mode, checked as `AgentConfig.from_env(memory=...)` checks it."""
    with _parsed_lock:
        settings = _parsed.get("settings") if _parsed.get("source") == _parsed_from() else None
    settings = settings or _parse()
    if memory is None or memory == settings.memory:
        return settings
    check_memory_mode(memory)
    return dataclasses.replace(settings, memory=memory)


def home_problem(home: Path) -> Optional[str]:
    """Why the store's home can't be used (it exists and is no writable folder, or it can't be created), else None:
    bad input caught at start-up, not a store outage once the server fails to start there. A folder that does not
    exist yet is probed by creating and removing its first missing level (/proc/tg fails here, even as root)."""
    if home.exists():
        if not home.is_dir():
            return "is not a directory"
        return None if os.access(home, os.W_OK | os.X_OK) else "is a folder this user can't write to"
    missing = home
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    if not missing.parent.is_dir():
        return f"can't be created: {missing.parent} is not a directory"
    try:
        missing.mkdir()
        missing.rmdir()
    except OSError as e:
        return f"can't be created: {e.strerror or e}"
    return None


def check_environment(also: Iterable[Callable[[Mapping[str, str]], object]] = ()) -> AgentConfig:
    """Every variable tradegraph reads, checked once at start-up so a bad one stops a command before it does
    anything: the configuration (types, ranges, choices, the providers' packages, keys and endpoints), the
    store's home, the debug flag and the API token; `also` are the upper layers' checks (the store URI, the
    execution policy), each raising ValueError. Raises ConfigError, one line naming the variable and value."""
    env = os.environ
    settings = _parse()  # the command's configuration (command_config) from here on
    home = env.get("TRADEGRAPH_HOME")
    if home is not None:
        if not home.strip():  # set but empty: never a silent fall back to another store
            raise ConfigError(f"TRADEGRAPH_HOME={home!r} is empty: name a folder, or unset it for the default home")
        problem = home_problem(Path(home).expanduser())
        if problem:
            raise ConfigError(f"TRADEGRAPH_HOME={home!r} {problem}")
    debug = env.get("TRADEGRAPH_DEBUG")
    if debug and debug.strip().lower() not in DEBUG_ON:
        # any non-empty value turns it on: a "0" that means on would surprise
        raise ConfigError(f"TRADEGRAPH_DEBUG={debug!r}: set it to 1 to show tracebacks, or unset it")
    token = env.get("TRADEGRAPH_API_TOKEN")
    if token is not None and token != "" and not token.strip():
        raise ConfigError(f"TRADEGRAPH_API_TOKEN={token!r} is blank")  # blank shows no secret
    audit_key = env.get("TRADEGRAPH_AUDIT_KEY")  # signs chain heads (database/heads.py); never shown
    if audit_key is not None and audit_key != "":
        if not audit_key.strip():
            raise ConfigError(f"TRADEGRAPH_AUDIT_KEY={audit_key!r} is blank")
        if len(audit_key.encode()) < AUDIT_KEY_MIN:
            raise ConfigError(
                f"TRADEGRAPH_AUDIT_KEY is {len(audit_key.encode())} byte(s) long: an HMAC-SHA256 key "
                f"needs at least {AUDIT_KEY_MIN} (e.g. `python -c 'import secrets; "
                f"print(secrets.token_hex(32))'`)"
            )
    from agent.pricing import check_prices_env

    for check in (check_prices_env, *also):
        try:
            check(env)
        except ValueError as e:
            raise ConfigError(str(e).splitlines()[0]) from None
    return settings
