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

from langchain_core.tools import BaseTool
from pydantic import BaseModel

from agent.config import AgentConfig, RetryPolicy, RiskLimits
from agent.data.market import DataError
from agent.data.sources import BY_ATTR, KINDS, Unavailable, is_bundled, load_file
from agent.data.stockbench import tree_sha256
from agent.input_window import TRADEGRAPH, InputWindow
from agent.markets import get_profile
from agent.prompts import BASE_SYSTEM, ROLE_INSTRUCTIONS
from agent.protocols import version
from agent.providers import tier_records
from agent.tools import TOOLS, allow_lists
from database.heads import MARK, signing_mark

# the cycle's inputs (symbols, as-of, portfolio, approval_required, a backtest's Case): what replay starts
# from; not configuration, so never compared with today
INPUTS = "inputs"
PROTOCOLS = "protocols"
# a manifest without "protocols" was recorded before they were versioned: by the code of protocol 1
UNVERSIONED_PASS_PROTOCOL = 1
PACKAGES = (
    "tradegraph",
    "langgraph",
    "langchain-core",
    "langchain-openai",
    "pydantic",
    "pymongo",
    "ta",
    "pandas",
    "exchange-calendars",
)


def _sha(obj: Any) -> str:
    data = obj if isinstance(obj, bytes) else json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _data_source(source: Any) -> dict[str, Any]:
    """The file a data source was loaded from and its content hash; in-memory data is named as such. A bundled
    sample says so, so a session continued (or replayed) from another checkout finds it where that one keeps it."""
    label = str(getattr(source, "origin", None) or getattr(source, "source", None) or "<unknown>")
    sha = None if isinstance(source, Unavailable) else getattr(source, "sha256", None)
    if sha:  # a StockBench tree or archive: hashed over what was read, when it was read (agent.data.stockbench)
        return {"source": label, "sha256": sha}
    path = Path(label)
    if not path.is_file():
        return {"source": label, "sha256": None}
    return _file_entry(path)


def _file_entry(path: Path) -> dict[str, Any]:
    if path.is_dir():  # a StockBench folder: the hash over the files it reads
        return {"source": str(path.resolve()), "sha256": tree_sha256(path)}
    st = path.stat()
    entry = dict(_hashed(str(path.resolve()), st.st_mtime_ns, st.st_size))
    if any(is_bundled(kind, path) for kind in KINDS):
        entry["bundled"] = True
    return entry


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


def _profile(name: str, decide_at: str) -> dict[str, Any]:
    """The market profile the cycle ran under, deciding when it decided (replay rebuilds it from `config`)."""
    return {
        k: (str(v) if not isinstance(v, (str, int, float, bool, type(None))) else v)
        for k, v in dataclasses.asdict(get_profile(name, decide_at)).items()
    }


@functools.lru_cache(maxsize=1)
def _code_identity() -> dict[str, Any]:
    """Tool-schema hashes and package versions: fixed for the process, so computed once (~10 ms: JSON Schema
    generation and package metadata) rather than on every cycle's hot path."""
    return {
        "tools": {name: _sha(_schema_of(tool)) for name, tool in sorted(TOOLS.items())},
        "versions": {p: _version(p) for p in PACKAGES},
    }


def _schema_of(tool: BaseTool) -> dict[str, Any]:
    """A tool's call schema as JSON Schema (every tool here is made by @tool from a function: a pydantic model)."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict) or not issubclass(schema, BaseModel):
        raise TypeError(f"tool {tool.name}: its call schema is not a pydantic model")
    return schema.model_json_schema()


@functools.lru_cache(maxsize=8)
def _allow_lists(protocol: int) -> dict[str, list[str]]:
    """The allow-lists a cycle ran with: the state table's, or under an older pass protocol the ones it had then."""
    return {state: sorted(names) for state, names in sorted(allow_lists(protocol).items())}


def _config(settings: AgentConfig) -> dict[str, Any]:
    """The configuration as recorded. The input window is written only when it is not tradegraph's (a StockBench
    run's): a recording from before it existed, and every ordinary run, reads as before."""
    config = dataclasses.asdict(settings)
    if settings.input_window == TRADEGRAPH:
        del config["input_window"]
    return config


def build_manifest(services, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    settings: AgentConfig = services.config
    models = tier_records(settings)
    manifest: dict[str, Any] = {
        "config": _config(settings),
        "market_profile": _profile(settings.market, settings.decide_at),
        # each tier's provider, model, the structured-output method and tool_choice its JSON pass used, and its
        # endpoint's host (the SDK's default when none is set; credentials in the URL never leave it)
        "models": models,
        "model_endpoint_host": ", ".join(sorted({m["endpoint_host"] for m in models.values() if m["endpoint_host"]}))
        or None,
        "prompts": {"system": _sha(BASE_SYSTEM), **{k: _sha(v) for k, v in sorted(ROLE_INSTRUCTIONS.items())}},
        # how the passes talked to the model (agent/passes.py): a replay asks what this recording asked
        PROTOCOLS: {"passes": (protocol := version(services.protocol).number)},
        "tools": dict(_code_identity()["tools"]),
        # the allow-lists this cycle's passes ran with (an older protocol's when a cycle runs under one)
        "allow_lists": copy.deepcopy(_allow_lists(protocol)),
        "versions": dict(_code_identity()["versions"]),
        "data": {
            "market": _data_source(services.market),
            "news": _data_source(services.news),
            "fundamentals": _data_source(services.fundamentals),
        },
    }
    if getattr(services, "actions", None) is not None:  # the dividends it credits change the book: recorded too
        manifest["data"]["actions"] = _data_source(services.actions)
    identity = getattr(getattr(services, "execution", None), "manifest", None)
    if identity is not None:  # a broker: which one, its host, the mandate (path, sha256, limits)
        manifest["broker"] = identity()
    mark = signing_mark()
    if mark is not None:  # heads signed under TRADEGRAPH_AUDIT_KEY: said inside the chain (database/heads.py)
        manifest[MARK] = mark
    if inputs is not None:  # ids are on the event itself
        manifest[INPUTS] = {k: v for k, v in inputs.items() if k not in ("session_id", "cycle_id")}
    return manifest


def recorded_pass_protocol(manifest: dict[str, Any] | None) -> int:
    """The pass protocol a cycle was recorded under; a cycle without a manifest, or whose manifest predates
    protocol versions, ran protocol 1."""
    return ((manifest or {}).get(PROTOCOLS) or {}).get("passes", UNVERSIONED_PASS_PROTOCOL)


def config_from_manifest(manifest: dict[str, Any]) -> AgentConfig:
    """The AgentConfig a cycle ran with, rebuilt from its manifest."""
    raw = dict(manifest["config"])
    raw["risk"] = RiskLimits(**raw["risk"])
    raw["retry"] = RetryPolicy(**raw["retry"])
    raw["input_window"] = InputWindow.from_dict(raw["input_window"]) if "input_window" in raw else TRADEGRAPH
    known = {f.name for f in dataclasses.fields(AgentConfig)}
    return AgentConfig(**{k: v for k, v in raw.items() if k in known})


def recorded_sources(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A replay's data: each recorded file read again only while its content hash matches the manifest's. A changed
    or missing file is a difference line and an Unavailable source that fails if read, never other data."""
    sources: dict[str, Any] = {}
    lines: list[str] = []
    for attr, entry in sorted(data.items()):
        kind, path, sha = BY_ATTR.get(attr), str(entry.get("source")), entry.get("sha256")
        if kind is None:
            continue
        label = f"data source {attr}"
        if not sha:
            lines.append(f"{label}: recorded {path!r} was not read from a file: nothing to check it against")
            sources[attr] = Unavailable(path, "was in-memory data when recorded: replay reads the recording only")
            continue
        now_path = kind.bundled.resolve() if entry.get("bundled") else Path(path)
        if not now_path.exists():
            lines.append(f"{label}.source: recorded file {path} is missing (recorded sha256 {sha[:12]}…)")
            sources[attr] = Unavailable(path, "missing since the run was recorded")
            continue
        now = _file_entry(now_path)
        if now["sha256"] != sha:
            lines.append(
                f"{label}.sha256: content hash differs: {now['source']} changed since the run "
                f"(recorded {sha[:12]}…, now {now['sha256'][:12]}…)"
            )
            sources[attr] = Unavailable(now["source"], "changed since the run was recorded (content hash differs)")
            continue
        if now["source"] != path:  # a bundled sample in another checkout
            lines.append(f"{label}.source: recorded {path!r}, now {now['source']!r} (same content)")
        try:
            sources[attr] = load_file(kind.name, now_path)
        except DataError as e:  # the same bytes no longer load: today's loader differs
            lines.append(f"{label}: {e}")
            sources[attr] = Unavailable(now["source"], f"no longer loads: {e}")
    return sources, lines


# how a difference is named to the user, by the longest matching path prefix
_LABELS = {
    "config.risk": "risk limit",
    "config.retry": "LLM retry",
    "config": "",
    "market_profile": "market profile",
    "prompts": "prompt template",
    "tools": "tool schema",
    "allow_lists": "allow-list",
    "versions": "package",
    "data": "data source",
    "model_endpoint_host": "model endpoint host",
    "models": "model",
    PROTOCOLS: "protocol",
}
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
    now 20.0', 'prompt template analyst:news: hash differs'. The recorded inputs are not configuration, nor is the
    key the heads were signed with."""
    out: list[str] = []
    for key in sorted(set(recorded) | set(current)):
        if not path and key in (INPUTS, MARK):
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
    data = ", ".join(
        f"{k} {Path(str(v.get('source'))).name}" + (f" ({v['sha256'][:10]})" if v.get("sha256") else "")
        for k, v in (m.get("data") or {}).items()
    )
    return (
        f"{settings.get('provider')} {settings.get('quick_model')}/{settings.get('deep_model')}"
        + (f" @ {m['model_endpoint_host']}" if m.get("model_endpoint_host") else "")
        + f" · market {settings.get('market')}"
        + (f" deciding at the {settings['decide_at']}" if settings.get("decide_at", "close") != "close" else "")
        + f" · fees {settings.get('fees_bps')} bps, slippage {settings.get('slippage_bps')} bps"
        + f" · max_notional {risk.get('max_notional_pct')}%, risk/trade {risk.get('risk_per_trade_pct')}%"
        + f" · budget {settings.get('token_budget') or 'none'} · data: {data}"
    )
