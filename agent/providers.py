"""Which chat model serves each tier, what its provider supports, and how it is built.

A tier's model is named `provider:model`, LangChain's `init_chat_model` convention: `openai:gpt-4o-mini`,
`anthropic:claude-3-5-haiku-latest`, `google_genai:gemini-2.0-flash`, `ollama:llama3.1:8b`. A name without one
of these prefixes (Ollama's own `qwen:7b` included) belongs to the default provider, TRADEGRAPH_LLM. An
OpenAI-compatible server (LM Studio, vLLM, DeepSeek) is the `openai` provider with OPENAI_BASE_URL set.

Every provider is built with its SDK's retries off: tradegraph's one retry loop (agent/passes.py) audits each
attempt. The JSON pass asks each provider for structured output the way it supports (`STRUCTURED_METHODS`);
a forced `tool_choice` is sent only where the server accepts one.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from agent.env import ConfigError, RetryPolicy

OFFLINE = "offline"
# json_schema: the provider constrains the answer to the contract's JSON Schema; json_mode: any JSON object,
# the schema stated in the prompt; function_calling: the contract offered as the one tool, inside the JSON pass
# json_object_schema: `{"type": "json_object", "schema": …}`, what llama.cpp's server constrains with (agent/model_profiles.py)
STRUCTURED_METHODS = ("json_schema", "json_mode", "function_calling", "json_object_schema")
TOOL_CHOICE_SETTINGS = ("auto", "on", "off")
# where a provider model carries what tradegraph chose for it (retry policy, structured method, tool_choice):
# `metadata` is a field every LangChain chat model has, so init_chat_model's plain classes can carry it
METADATA_KEY = "tradegraph"


@dataclass(frozen=True)
class Provider:
    name: str  # init_chat_model's provider key
    package: str  # the LangChain integration module
    extra: Optional[str]  # `pip install 'tradegraph[extra]'`; None: a core dependency
    key_vars: tuple[str, ...]  # one of them must be set
    url_vars: tuple[str, ...]  # a custom endpoint, the first one set wins (the SDK's own order)
    default_url: str
    methods: tuple[str, ...]  # structured-output methods it supports, its default first
    tool_choice: bool  # accepts a forced tool_choice
    default_models: Optional[tuple[str, str]] = None  # quick, deep


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(
            "openai",
            "langchain_openai",
            None,
            ("OPENAI_API_KEY",),
            ("OPENAI_BASE_URL",),
            "https://api.openai.com/v1",
            ("json_schema", "json_mode", "function_calling", "json_object_schema"),
            True,
            ("gpt-4o-mini", "gpt-4o"),
        ),
        # forced tool use works on every Claude model; native JSON-schema output only on recent ones
        Provider(
            "anthropic",
            "langchain_anthropic",
            "anthropic",
            ("ANTHROPIC_API_KEY",),
            ("ANTHROPIC_API_URL", "ANTHROPIC_BASE_URL"),
            "https://api.anthropic.com",
            ("function_calling", "json_schema"),
            True,
        ),
        Provider(
            "google_genai",
            "langchain_google_genai",
            "google",
            ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
            ("GOOGLE_GEMINI_BASE_URL",),
            "https://generativelanguage.googleapis.com",
            ("json_schema", "json_mode", "function_calling"),
            True,
        ),
        # Ollama's chat API has no tool_choice at all
        Provider(
            "ollama",
            "langchain_ollama",
            "ollama",
            (),
            ("OLLAMA_HOST",),
            "http://127.0.0.1:11434",
            ("json_schema", "json_mode", "function_calling"),
            False,
        ),
    )
}
OPENAI_HOST = "api.openai.com"
VERTEX_VAR = "GOOGLE_GENAI_USE_VERTEXAI"
OFFLINE_MODELS = ("offline-quick", "offline-deep")
TIER_VARS = {"quick": "TRADEGRAPH_QUICK_MODEL", "deep": "TRADEGRAPH_DEEP_MODEL"}


@dataclass(frozen=True)
class TierModel:
    """One tier's model as resolved from the configuration: recorded in the run manifest."""

    tier: str
    provider: str  # OFFLINE or a PROVIDERS key
    model: str  # the provider's own name for it
    structured_method: str
    tool_choice: bool  # whether a forced tool_choice may be sent
    endpoint: Optional[str]  # scheme://host[:port][/path], credentials and query removed; None offline
    chosen_by: str  # the variable that picked the provider, named in errors
    # 0 (as reproducible as the server allows; replay is the real guarantee), or None for a model that takes
    # none but its default (LangChain's profile: GPT-5, Claude Sonnet 5.5)
    temperature: Optional[float] = 0
    # from the endpoint's profile (`tradegraph models check`, agent/model_profiles.py): its context window, and
    # when the profile chose the structured method
    context_window: Optional[int] = None
    profiled: bool = False
    # how many requests may be in flight to the endpoint at once (None: no cap; agent/endpoint_slots.py)
    concurrency: Optional[int] = None

    def record(self) -> dict[str, Any]:
        """What the run manifest keeps: of the endpoint only its host, as for every URL it records."""
        out = {
            "provider": self.provider,
            "model": self.model,
            "structured_method": self.structured_method,
            "tool_choice": self.tool_choice,
            "temperature": self.temperature,
            "endpoint_host": urlsplit(self.endpoint).hostname if self.endpoint else None,
        }
        if self.context_window or self.profiled:
            out.update(context_window=self.context_window, method_from_profile=self.profiled)
        if self.concurrency is not None:  # only when capped: every other manifest reads as before
            out["concurrency"] = self.concurrency
        return out


def split_model(name: str) -> tuple[Optional[str], str]:
    """'anthropic:claude-x' -> ('anthropic', 'claude-x'); a name without a known provider prefix -> (None, name)."""
    prefix, sep, rest = name.partition(":")
    if sep and (prefix in PROVIDERS or prefix == OFFLINE):
        return prefix, rest
    return None, name


def default_provider(llm: Optional[str], quick: Optional[str], deep: Optional[str], env: Mapping[str, str]) -> str:
    """TRADEGRAPH_LLM, else the provider the tiers name, else openai when OPENAI_API_KEY or OPENAI_BASE_URL is set
    (an OpenAI-compatible server was pointed at: its model must answer, never the offline one), else offline."""
    if llm:
        name = llm.strip().lower()
        if name != OFFLINE and name not in PROVIDERS:
            raise ConfigError(f"TRADEGRAPH_LLM={llm!r} must be one of {', '.join((OFFLINE, *PROVIDERS))}")
        return name
    named = [p for p in (split_model(n)[0] for n in (quick, deep) if n) if p]
    if named:
        return named[0]
    return "openai" if (env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL")) else OFFLINE


def default_models(provider: str) -> Optional[tuple[str, str]]:
    return OFFLINE_MODELS if provider == OFFLINE else PROVIDERS[provider].default_models


def endpoint_of(provider: str, env: Mapping[str, str]) -> tuple[Optional[str], Optional[str]]:
    """(the variable that set it or None, the endpoint URL as the SDK will use it)."""
    if provider == OFFLINE:
        return None, None
    p = PROVIDERS[provider]
    for var in p.url_vars:
        if env.get(var):
            return var, env[var]
    return None, p.default_url


def public_url(url: Optional[str]) -> Optional[str]:
    """A URL fit for the record: no user:password, no query (Google keys travel as `?key=`)."""
    if not url:
        return None
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        netloc = host + (f":{parts.port}" if parts.port else "")
    except ValueError:  # a port that is not a number: keep what was written, it is reported as is
        netloc = host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_url(var: str, value: str) -> None:
    parts = urlsplit(value if "://" in value else "http://" + value)
    try:
        _ = parts.port  # reading it raises ValueError for a port that is not a number
    except ValueError:
        raise ConfigError(f"{var}={value!r} has a port that is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not _HOST.fullmatch(parts.hostname):
        raise ConfigError(f"{var}={value!r} is not an http(s) URL")


# a host name (RFC 1123 labels), an IPv4 address or a bracketed IPv6 one: 'not a url' parses with host 'not a url'
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|[0-9A-Fa-f:.]+(%\w+)?")


def resolve_tier(
    tier: str,
    name: str,
    provider: str,
    method: str,
    tool_choice: str,
    env: Mapping[str, str],
    chosen_by: Optional[str] = None,
    profile: Optional[Mapping[str, Any]] = None,
    temperature: Optional[float] = None,
) -> TierModel:
    """A tier's model from its configured name, the default provider and the overrides; raises ConfigError
    naming the variable for a combination the provider can't serve. `profile` is LangChain's model profile: a
    model it says refuses a forced tool_choice (Claude Sonnet 5.5) gets the provider's next method and none.
    `temperature` is the configured one (None: 0); a model that takes none is sent none."""
    var = TIER_VARS[tier]
    named, model = split_model(name)
    provider = named or provider
    chosen_by = var if named else (chosen_by or "TRADEGRAPH_LLM")
    if not model.strip():
        raise ConfigError(f"{var}={name!r} names no model")
    if provider == OFFLINE:
        if model not in OFFLINE_MODELS:
            # the offline model answers only under its own names: a name it does not own (a typo'd provider
            # prefix, a provider's model with none configured) would run offline labelled as that model
            prefix = name.partition(":")[0] if ":" in name else None
            why = (
                f"{prefix!r} is not a provider ({', '.join((OFFLINE, *PROVIDERS))})"
                if prefix and prefix != OFFLINE
                else f"the offline model is {' or '.join(OFFLINE_MODELS)}"
            )
            raise ConfigError(
                f"{var}={name!r}: {why}, and no provider is configured for it (set TRADEGRAPH_LLM, or "
                f"name it provider:model)"
            )
        if method not in ("auto", "json_schema"):
            raise ConfigError(
                f"TRADEGRAPH_STRUCTURED_METHOD={method!r} does not apply to the offline model of the "
                f"{tier} tier ({var}={name!r}), which answers json_schema only"
            )
        if tool_choice == "on":
            raise ConfigError(f"TRADEGRAPH_TOOL_CHOICE='on' does not apply to the offline model of the {tier} tier")
        return TierModel(tier, OFFLINE, model, "json_schema", False, None, chosen_by, None)
    p = PROVIDERS[provider]
    refuses_choice = (profile or {}).get("tool_choice") is False
    if method == "auto":
        method = p.methods[1] if p.methods[0] == "function_calling" and refuses_choice else p.methods[0]
    elif method not in p.methods:
        raise ConfigError(
            f"TRADEGRAPH_STRUCTURED_METHOD={method!r} is not supported by {provider} ({var}={name!r}); "
            f"use one of {', '.join(p.methods)}"
        )
    url_var, url = endpoint_of(provider, env)
    if url_var and url is not None:  # a variable set names its URL
        check_url(url_var, url)
    if tool_choice == "on" and not p.tool_choice:
        raise ConfigError(f"TRADEGRAPH_TOOL_CHOICE='on': {provider} has no tool_choice ({var}={name!r})")
    if tool_choice == "auto":
        # an OpenAI-compatible server may reject tool_choice (LM Studio does): not sent unless asked for
        forced = (
            p.tool_choice
            and not refuses_choice
            and not (provider == "openai" and urlsplit(url).hostname != OPENAI_HOST)
        )
    else:
        forced = tool_choice == "on"
    sent = None if (profile or {}).get("temperature") is False else (0 if temperature is None else temperature)
    return TierModel(tier, provider, model, method, forced, public_url(url), chosen_by, sent)


def tier_model(settings, tier: str, env: Optional[Mapping[str, str]] = None, with_profile: bool = True) -> TierModel:
    """The resolved model of a tier of an AgentConfig (the endpoint is today's environment's). `with_profile`
    reads LangChain's model profile, which imports the provider's package: the model is built from the same
    resolution, so what the manifest records is what the JSON pass does."""
    env = os.environ if env is None else env
    name = settings.deep_model if tier == "deep" else settings.quick_model
    by = (
        None
        if env.get("TRADEGRAPH_LLM") or settings.provider != "openai" or env.get("OPENAI_API_KEY")
        else ("OPENAI_BASE_URL" if env.get("OPENAI_BASE_URL") else None)
    )  # the variable that picked openai, for errors
    temperature = getattr(settings, "temperature", None)
    tm = resolve_tier(
        tier,
        name,
        settings.provider,
        settings.structured_method,
        settings.tool_choice,
        env,
        by,
        temperature=temperature,
    )
    tm = with_endpoint_profile(tm, settings.structured_method)
    if not with_profile or tm.provider == OFFLINE or importlib.util.find_spec(PROVIDERS[tm.provider].package) is None:
        return with_concurrency(tm, env)
    return with_concurrency(
        with_endpoint_profile(
            resolve_tier(
                tier,
                name,
                settings.provider,
                settings.structured_method,
                settings.tool_choice,
                env,
                by,
                profile=model_profile(tm.provider, tm.model),
                temperature=temperature,
            ),
            settings.structured_method,
        ),
        env,
    )


CONCURRENCY_VAR = "TRADEGRAPH_LLM_CONCURRENCY"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def with_concurrency(tm: TierModel, env: Mapping[str, str]) -> TierModel:
    """The cap on requests in flight to the tier's endpoint: TRADEGRAPH_LLM_CONCURRENCY (0: none), else 1 for a
    checked server on this machine (llama.cpp's answers one request at a time: parallel analysts queued behind
    each other and timed out, since a request's timeout counts its wait in the server's queue), else none."""
    raw = (env.get(CONCURRENCY_VAR) or "").strip()
    n: Optional[int] = None
    if raw:  # checked whichever model answers: a bad value is refused, never ignored because the offline one runs
        try:
            n = int(raw)
        except ValueError:
            raise ConfigError(f"{CONCURRENCY_VAR}={raw!r} is not an integer") from None
        if not 0 <= n <= 64:
            raise ConfigError(f"{CONCURRENCY_VAR}={raw!r} is outside 0..64")
    if tm.provider == OFFLINE:
        return tm
    if n is not None:
        return dataclasses.replace(tm, concurrency=n or None)
    local = tm.endpoint is not None and urlsplit(tm.endpoint).hostname in LOOPBACK
    return dataclasses.replace(tm, concurrency=1) if local and (tm.context_window or tm.profiled) else tm


def with_endpoint_profile(tm: TierModel, configured: str) -> TierModel:
    """An OpenAI-compatible endpoint's checked profile applied: its context window, its structured method when
    none is configured (`auto`); a model the endpoint did not list when checked is refused (ConfigError)."""
    from agent import model_profiles

    if tm.provider != "openai" or not tm.endpoint:
        return tm
    profile = model_profiles.lookup(tm.endpoint, tm.model)
    if profile is None:
        listed = [p for p in model_profiles.load().values() if p.get("endpoint") == tm.endpoint.rstrip("/")]
        if listed and tm.model not in (listed[-1].get("models") or []):
            raise ConfigError(
                f"{TIER_VARS[tm.tier]}: model {tm.model!r} is not one {tm.endpoint} listed when checked "
                f"({', '.join(listed[-1].get('models') or []) or 'none'}); name one of them, or delete "
                f"{model_profiles.profile_path()} if the server changed"
            )
        return tm
    method = profile.get("structured_method")
    if configured == "auto" and method is None:
        raise ConfigError(
            f"{tm.endpoint} {tm.model}: no structured method worked when checked ("
            + "; ".join(f"{m}: {r.get('server')}" for m, r in (profile.get("methods") or {}).items())
            + "): set TRADEGRAPH_STRUCTURED_METHOD to try one anyway"
        )
    use: str = method if configured == "auto" and method is not None else tm.structured_method
    return dataclasses.replace(
        tm,
        structured_method=use,
        context_window=profile.get("context_window"),
        profiled=configured == "auto",
        tool_choice=tm.tool_choice
        or (use == "function_calling" and profile["methods"].get("tools", {}).get("ok", False)),
    )


@functools.lru_cache(maxsize=32)
def model_profile(provider: str, model: str) -> dict[str, Any]:
    """What LangChain declares the model supports (tool_choice, native structured output); {} when unknown.
    Read from a model built with a placeholder key: building one makes no request."""
    from langchain.chat_models import init_chat_model

    extra: dict[str, Any] = {"api_key": "profile-only"} if PROVIDERS[provider].key_vars else {}
    if provider == "google_genai":
        extra["vertexai"] = False
    return dict(init_chat_model(model, model_provider=provider, **extra).profile or {})


def tier_records(settings) -> dict[str, dict[str, Any]]:
    return {tier: tier_model(settings, tier).record() for tier in ("quick", "deep")}


def check_ready(tm: TierModel, name: str, env: Mapping[str, str]) -> None:
    """The provider's package is installed and its key is set; else one line naming what to do."""
    if tm.provider == OFFLINE:
        return
    p = PROVIDERS[tm.provider]
    value = {"TRADEGRAPH_LLM": tm.provider, "OPENAI_BASE_URL": env.get("OPENAI_BASE_URL")}.get(tm.chosen_by, name)
    shown = f"{tm.chosen_by}={value!r}"
    if importlib.util.find_spec(p.package) is None:
        how = f"pip install 'tradegraph[{p.extra}]'" if p.extra else f"pip install {p.package.replace('_', '-')}"
        raise ConfigError(f"{shown} needs the {p.package} package: {how}")
    if p.key_vars and not any((env.get(k) or "").strip() for k in p.key_vars):
        local = (
            " (a local OpenAI-compatible server takes any value)"
            if tm.provider == "openai" and (urlsplit(tm.endpoint or "").hostname != OPENAI_HOST)
            else ""
        )
        raise ConfigError(f"{shown} needs {' or '.join(p.key_vars)} to be set{local}")
    vertex = env.get(VERTEX_VAR) or ""
    if tm.provider == "google_genai" and vertex.strip().lower() in ("1", "true"):
        # google-genai would quietly send the Gemini API key's requests to Vertex AI instead
        raise ConfigError(f"{VERTEX_VAR}={vertex!r}: {shown} is the Gemini API; unset it (Vertex AI is not supported)")


def build_model(tm: TierModel, retry: RetryPolicy, env: Optional[Mapping[str, str]] = None, output_caps: str = ""):
    """The provider's LangChain chat model through init_chat_model, SDK retries off, the endpoint and key passed
    explicitly (what the manifest records is what is called), and tradegraph's choices in its metadata."""
    from langchain.chat_models import init_chat_model

    from agent.output_caps import parse as output_caps_table

    env = os.environ if env is None else env
    p = PROVIDERS[tm.provider]
    _, url = endpoint_of(tm.provider, env)
    key = next((env[k] for k in p.key_vars if (env.get(k) or "").strip()), None)
    kwargs: dict[str, Any] = {"base_url": url}
    if tm.temperature is not None:
        kwargs["temperature"] = tm.temperature
    if key is not None:
        kwargs["api_key"] = key
    # a seed as for the temperature 0; a sampling temperature is sent none, else every run of it (StockBench's 3
    # at 0.7) would draw the same sample
    seeded = not tm.temperature
    if tm.provider == "ollama":
        # httpx under the ollama client never retries by itself
        kwargs.update(client_kwargs={"timeout": retry.timeout_s}, **({"seed": 7} if seeded else {}))
    else:
        kwargs.update(timeout=retry.timeout_s, max_retries=0)
    if tm.provider == "openai" and seeded:
        kwargs["seed"] = 7
    if tm.provider == "google_genai":
        # max_retries=0 is google-genai's "one attempt"; the Gemini API, never Vertex AI from the environment
        kwargs["vertexai"] = False
    metadata = {
        METADATA_KEY: {
            **tm.record(),
            "endpoint": tm.endpoint,
            "retry": dataclasses.asdict(retry),
            "output_caps": output_caps_table(output_caps),
        }
    }
    return init_chat_model(tm.model, model_provider=tm.provider, metadata=metadata, **kwargs)


def capped(bound, model, cap: int):
    """`bound` (a model, or a model with its tools or response format) asking for at most `cap` output tokens, in
    the parameter its provider reads: Ollama's num_predict travels in its options, which replace the model's own."""
    provider = choices_of(model).get("provider")
    if provider == "ollama":
        options = {
            k: v
            for k, v in (("temperature", getattr(model, "temperature", None)), ("seed", getattr(model, "seed", None)))
            if v is not None
        }
        return bound.bind(options={**options, "num_predict": cap})
    if provider == "openai" and urlsplit(choices_of(model).get("endpoint") or "").hostname not in (None, OPENAI_HOST):
        # ChatOpenAI sends max_tokens as max_completion_tokens, which llama.cpp's server ignores: an
        # OpenAI-compatible server gets the older name, which every one of them reads
        return bound.bind(extra_body={"max_tokens": cap})
    return bound.bind(**{"max_output_tokens" if provider == "google_genai" else "max_tokens": cap})


def choices_of(model) -> dict[str, Any]:
    """What tradegraph chose for a provider model; {} for its own models (offline, replay)."""
    return (getattr(model, "metadata", None) or {}).get(METADATA_KEY) or {}


def model_name_of(model) -> str:
    """The model's own name: ChatOpenAI and tradegraph's models call it `model_name`, the other integrations `model`."""
    return getattr(model, "model_name", None) or getattr(model, "model", None) or ""
