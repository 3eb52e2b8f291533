"""The run manifest: a cycle's effective configuration, recorded as its first event.

Replay re-executes with the recorded configuration, and `--verify` tells the user, key by key, where
today's code or configuration differs from what the cycle ran with (Temporal's rule: history is the
truth; a departure from it is reported, never hidden). No secret is ever recorded: of the model's
endpoint only the host is kept.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agent.config import AgentConfig, RetryPolicy, RiskLimits
from agent.prompts import BASE_SYSTEM, ROLE_INSTRUCTIONS
from agent.tools import ALLOW_LISTS, REGISTRY

PACKAGES = ("tradegraph", "langgraph", "langchain-core", "langchain-openai", "pydantic", "pymongo", "ta", "pandas",
            "exchange-calendars")


def _sha(obj: Any) -> str:
    data = obj if isinstance(obj, bytes) else json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _file_source(label: str) -> dict[str, Any]:
    path = Path(label)
    if not path.is_file():
        return {"source": label}
    st = path.stat()
    return _hashed(str(path.resolve()), st.st_mtime_ns, st.st_size)


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


def build_manifest(runtime) -> dict[str, Any]:
    cfg: AgentConfig = runtime.config
    base_url = os.environ.get("OPENAI_BASE_URL") or ""
    return {
        "config": dataclasses.asdict(cfg),
        "model_endpoint_host": (urlparse(base_url).hostname if base_url else None) if cfg.provider != "offline" else None,
        "prompts": {"system": _sha(BASE_SYSTEM), **{k: _sha(v) for k, v in sorted(ROLE_INSTRUCTIONS.items())}},
        "tools": {name: _sha(tool.tool_call_schema.model_json_schema()) for name, tool in sorted(REGISTRY.items())},
        "allow_lists": {state: sorted(names) for state, names in sorted(ALLOW_LISTS.items())},
        "versions": {p: _version(p) for p in PACKAGES},
        "data": {"market": _file_source(getattr(runtime.market, "source", "?")),
                 "news": _file_source(getattr(runtime.news, "source", "?")),
                 "fundamentals": _file_source(getattr(runtime.fundamentals, "source", "?"))},
    }


def config_from_manifest(manifest: dict[str, Any]) -> AgentConfig:
    """The AgentConfig a cycle ran with, rebuilt from its manifest."""
    raw = dict(manifest["config"])
    raw["risk"] = RiskLimits(**raw["risk"])
    raw["retry"] = RetryPolicy(**raw["retry"])
    known = {f.name for f in dataclasses.fields(AgentConfig)}
    return AgentConfig(**{k: v for k, v in raw.items() if k in known})


def manifest_differences(recorded: dict[str, Any], current: dict[str, Any], path: str = "") -> list[str]:
    """One line per leaf that differs: 'config.risk.max_notional_pct: recorded 25.0, now 20.0'."""
    out: list[str] = []
    for key in sorted(set(recorded) | set(current)):
        where = f"{path}.{key}" if path else key
        a, b = recorded.get(key, "<absent>"), current.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += manifest_differences(a, b, where)
        elif a != b:
            out.append(f"{where}: recorded {a!r}, now {b!r}")
    return out
