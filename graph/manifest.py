"""The run manifest: a cycle's effective configuration and its inputs, recorded as its first event.

Replay re-executes with the recorded configuration and inputs, and `--verify` tells the user, key by
key, where today's code or configuration differs from what the cycle ran with (Temporal's rule: history
is the truth; a departure from it is reported, never hidden). No secret is ever recorded: of the
model's endpoint only the host is kept.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.config import AgentConfig, RetryPolicy, RiskLimits
from agent.markets import get_profile
from agent.prompts import BASE_SYSTEM, ROLE_INSTRUCTIONS
from agent.providers import tier_records
from agent.tools import ALLOW_LISTS, REGISTRY

# the cycle's inputs (symbols, as-of, portfolio, approval_required, a backtest's Case): what replay starts
# from; not configuration, so never compared with today
INPUTS = "inputs"
PACKAGES = ("tradegraph", "langgraph", "langchain-core", "langchain-openai", "pydantic", "pymongo", "ta", "pandas",
            "exchange-calendars")


def _sha(obj: Any) -> str:
    data = obj if isinstance(obj, bytes) else json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _data_source(source: Any) -> dict[str, Any]:
    """The file a data source was loaded from and its content hash; in-memory data is named as such."""
    label = str(getattr(source, "origin", None) or getattr(source, "source", None) or "<unknown>")
    path = Path(label)
    if not path.is_file():
        return {"source": label, "sha256": None}
    st = path.stat()
    return dict(_hashed(str(path.resolve()), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=64)
def _hashed(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """Content hash, computed once per file version (a backtest records a manifest per cycle)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return {"source": path, "sha256": digest.hexdigest()}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _profile(name: str) -> dict[str, Any]:
    return {k: (str(v) if not isinstance(v, (str, int, float, bool, type(None))) else v)
            for k, v in dataclasses.asdict(get_profile(name)).items()}


@functools.lru_cache(maxsize=1)
def _code_identity() -> dict[str, Any]:
    """Tool-schema hashes, allow-lists and package versions: fixed for the process, so computed once
    (~10 ms: JSON Schema generation and package metadata) rather than on every cycle's hot path."""
    return {
        "tools": {name: _sha(tool.tool_call_schema.model_json_schema()) for name, tool in sorted(REGISTRY.items())},
        "allow_lists": {state: sorted(names) for state, names in sorted(ALLOW_LISTS.items())},
        "versions": {p: _version(p) for p in PACKAGES},
    }


def build_manifest(runtime, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    settings: AgentConfig = runtime.config
    models = tier_records(settings)
    manifest = {
        "config": dataclasses.asdict(settings),
        "market_profile": _profile(settings.market),
        # each tier's provider, model, the structured-output method and tool_choice its JSON pass used, and its
        # endpoint's host (the SDK's default when none is set; credentials in the URL never leave it)
        "models": models,
        "model_endpoint_host": ", ".join(sorted({m["endpoint_host"] for m in models.values() if m["endpoint_host"]}))
                               or None,
        "prompts": {"system": _sha(BASE_SYSTEM), **{k: _sha(v) for k, v in sorted(ROLE_INSTRUCTIONS.items())}},
        **copy.deepcopy(_code_identity()),
        "data": {"market": _data_source(runtime.market), "news": _data_source(runtime.news),
                 "fundamentals": _data_source(runtime.fundamentals)},
    }
    if inputs is not None:  # ids are on the event itself
        manifest[INPUTS] = {k: v for k, v in inputs.items() if k not in ("session_id", "cycle_id")}
    return manifest


def config_from_manifest(manifest: dict[str, Any]) -> AgentConfig:
    """The AgentConfig a cycle ran with, rebuilt from its manifest."""
    raw = dict(manifest["config"])
    raw["risk"] = RiskLimits(**raw["risk"])
    raw["retry"] = RetryPolicy(**raw["retry"])
    known = {f.name for f in dataclasses.fields(AgentConfig)}
    return AgentConfig(**{k: v for k, v in raw.items() if k in known})


# how a difference is named to the user, by the longest matching path prefix
_LABELS = {"config.risk": "risk limit", "config.retry": "LLM retry", "config": "", "market_profile": "market profile",
           "prompts": "prompt template", "tools": "tool schema", "allow_lists": "allow-list", "versions": "package",
           "data": "data source", "model_endpoint_host": "model endpoint host", "models": "model"}
_HASHED = ("prompts", "tools")


def _describe(where: list[str], recorded: Any, now: Any) -> str:
    for cut in range(len(where), 0, -1):
        prefix = ".".join(where[:cut])
        if prefix in _LABELS:
            name = " ".join(x for x in [_LABELS[prefix], ".".join(where[cut:])] if x)
            break
    else:
        name = ".".join(where)
    hashed = where[0] in _HASHED or where[-1] == "sha256"
    if hashed and None not in (recorded, now) and "<absent>" not in (recorded, now):
        return f"{name}: {'content ' if where[-1] == 'sha256' else ''}hash differs"
    return f"{name}: recorded {recorded!r}, now {now!r}"


def manifest_differences(recorded: dict[str, Any], current: dict[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """One plain line per leaf that differs, every one of them: 'risk limit max_notional_pct: recorded 25.0,
    now 20.0', 'prompt template analyst:news: hash differs'. The recorded inputs are not configuration."""
    out: list[str] = []
    for key in sorted(set(recorded) | set(current)):
        if not path and key == INPUTS:
            continue
        where = path + (str(key),)
        a, b = recorded.get(key, "<absent>"), current.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += manifest_differences(a, b, where)
        elif a != b:
            out.append(_describe(list(where), a, b))
    return out


def summary_line(m: dict) -> str:
    """The recorded configuration in one line: provider, models, market, the limits that size orders, data."""
    settings, risk = m.get("config") or {}, (m.get("config") or {}).get("risk") or {}
    data = ", ".join(f"{k} {Path(str(v.get('source'))).name}" + (f" ({v['sha256'][:10]})" if v.get("sha256") else "")
                     for k, v in (m.get("data") or {}).items())
    return (f"{settings.get('provider')} {settings.get('quick_model')}/{settings.get('deep_model')}"
            + (f" @ {m['model_endpoint_host']}" if m.get("model_endpoint_host") else "")
            + f" · market {settings.get('market')} · fees {settings.get('fees_bps')} bps, slippage {settings.get('slippage_bps')} bps"
            + f" · max_notional {risk.get('max_notional_pct')}%, risk/trade {risk.get('risk_per_trade_pct')}%"
            + f" · budget {settings.get('token_budget') or 'none'} · data: {data}")
