"""What an OpenAI-compatible server and model can do, asked once (`tradegraph models check`) and kept (issue 31).

Servers that speak OpenAI's API differ in structured output: llama.cpp's Python server answers 500 to
`response_format: json_schema` and takes `{"type": "json_object", "schema": …}`, LM Studio refuses `json_object`
and `tool_choice`, Ollama's /v1 and vLLM take `json_schema`. `check` asks the server for its models, tries each
method on a tiny contract (PROBE), measures each answer's latency and the context window (from the model list, or
from the server's refusal of a prompt too long for it), and picks the first method that answered a valid PROBE in
PREFERENCE order. The profile is kept in the store's home (`model_profiles.json`, keyed by endpoint and model); a
run whose structured method is `auto` uses the profile's, and a model its endpoint did not list is refused.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from agent.env import ConfigError

PROFILE_FILE = "model_profiles.json"
# wire method -> tradegraph's structured method (agent/providers.py STRUCTURED_METHODS)
METHODS = {"json_schema": "json_schema", "json_object_schema": "json_object_schema", "tools": "function_calling"}
PREFERENCE = ("json_schema", "json_object_schema", "tools")
PROBE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["answer"],
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
}
PROBE_PROMPT = 'Is 2 greater than 1? Reply with only a JSON object: {"answer": "yes"} or {"answer": "no"}.'
PROBE_CAP = 24
# a prompt longer than any local model's window (~40k tokens): the server's refusal states the window
OVERSIZED_WORDS = 40_000
_WINDOW = re.compile(
    r"(?:maximum context length is|context window of|context length of|n_ctx[=: ]+)\s*(\d+)", re.IGNORECASE
)
_CONTEXT_FIELDS = ("max_model_len", "context_length", "max_context_length", "context_window", "n_ctx")

# the home's folder, installed by the graph layer (graph/machine/cycle_context.py): the agent layer can't import database
_home: list[Optional[Callable[[], Path]]] = [None]
_lock = threading.Lock()


def install_home(resolver: Callable[[], Path]) -> None:
    _home[0] = resolver


def profile_path() -> Optional[Path]:
    return _home[0]() / PROFILE_FILE if _home[0] is not None else None


def key_of(endpoint: str, model: str) -> str:
    return f"{endpoint.rstrip('/')} {model}"


def load(path: Optional[Path] = None) -> dict[str, Any]:
    path = path or profile_path()
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{path}: model profiles can't be read ({type(e).__name__}): run `tradegraph models "
            f"check` again or delete it"
        ) from None
    return data if isinstance(data, dict) else {}


def lookup(endpoint: Optional[str], model: str) -> Optional[dict[str, Any]]:
    if not endpoint:
        return None
    return load().get(key_of(endpoint, model))


def save(profile: dict[str, Any], path: Optional[Path] = None) -> Path:
    path = path or profile_path()
    if path is None:
        raise ConfigError("no home to keep model profiles in")
    with _lock:
        profiles = load(path)
        profiles[key_of(profile["endpoint"], profile["model"])] = profile
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(profiles, indent=2, sort_keys=True))
        tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------------------ asking the server
def _post(client, url: str, body: dict) -> tuple[int, Any, float]:
    started = time.monotonic()
    r = client.post(url, json=body)
    took = round(time.monotonic() - started, 3)
    try:
        data = r.json()
    except ValueError:
        data = r.text
    return r.status_code, data, took


def server_said(data: Any) -> str:
    """The server's own words from an error body, on one line."""
    if isinstance(data, dict):
        err = data.get("error", data)
        text = err.get("message") if isinstance(err, dict) else err
        text = text if text is not None else data.get("detail", data)
    else:
        text = data
    text = " ".join(str(text).split())
    return text if len(text) <= 240 else text[:240] + "…"


def probe_body(model: str, method: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": PROBE_CAP,
        "temperature": 0,
    }
    if method == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "Probe", "schema": PROBE_SCHEMA, "strict": False},
        }
    elif method == "json_object_schema":
        body["response_format"] = {"type": "json_object", "schema": PROBE_SCHEMA}
    else:
        body["tools"] = [
            {"type": "function", "function": {"name": "Probe", "description": "the answer", "parameters": PROBE_SCHEMA}}
        ]
        body["tool_choice"] = {"type": "function", "function": {"name": "Probe"}}
    return body


def _answer(data: Any) -> Optional[str]:
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    calls = message.get("tool_calls") or []
    if calls:
        return calls[0].get("function", {}).get("arguments")
    return message.get("content")


def try_method(client, base: str, model: str, method: str) -> dict[str, Any]:
    status, data, took = _post(client, f"{base}/chat/completions", probe_body(model, method))
    if status != 200:
        return {"ok": False, "status": status, "latency_s": took, "server": server_said(data)}
    text = _answer(data)
    try:
        parsed = json.loads(text or "")
        ok = isinstance(parsed, dict) and parsed.get("answer") in ("yes", "no") and set(parsed) == {"answer"}
    except ValueError:
        ok = False
    return {
        "ok": ok,
        "status": status,
        "latency_s": took,
        "answer": (text or "")[:120],
        **({} if ok else {"server": "answered 200, but not a valid Probe"}),
    }


def context_window(client, base: str, model: str, listed: dict[str, Any]) -> tuple[Optional[int], str]:
    """(window, how it was found): a field of the model list, else the server's refusal of an oversized prompt."""
    for name in _CONTEXT_FIELDS:
        value = listed.get(name) or (listed.get("meta") or {}).get(name)
        if isinstance(value, int) and value > 0:
            return value, f"/v1/models {name}"
    body = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "word " * OVERSIZED_WORDS}]}
    status, data, _ = _post(client, f"{base}/chat/completions", body)
    found = _WINDOW.search(server_said(data)) if status != 200 else None
    if found:
        return int(found.group(1)), f"the server's refusal of a {OVERSIZED_WORDS}-word prompt"
    return None, (
        "unknown: the server took a prompt of ~40k tokens without refusing it (it may truncate)"
        if status == 200
        else f"unknown: HTTP {status} {server_said(data)}"
    )


def check(base: str, key: str, model: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """The profile of `model` at the OpenAI-compatible endpoint `base` (…/v1). Raises ConfigError when the server
    can't be reached or does not list the model."""
    import httpx

    base = base.rstrip("/")
    with httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"}) as client:
        try:
            r = client.get(f"{base}/models")
        except httpx.HTTPError as e:
            raise ConfigError(f"{base}/models: {type(e).__name__}: {e}") from None
        if r.status_code != 200:
            raise ConfigError(f"{base}/models answered HTTP {r.status_code}: {server_said(r.text)}")
        entries = [m for m in (r.json().get("data") or []) if isinstance(m, dict)]
        ids = [str(m.get("id")) for m in entries]
        if model not in ids:
            raise ConfigError(f"model {model!r} is not one {base} lists ({', '.join(ids) or 'none'})")
        listed = next(m for m in entries if m.get("id") == model)
        methods = {m: try_method(client, base, model, m) for m in PREFERENCE}
        window, found_by = context_window(client, base, model, listed)
    chosen = next((m for m in PREFERENCE if methods[m]["ok"]), None)
    return {
        "endpoint": base,
        "model": model,
        "models": ids,
        "methods": methods,
        "chosen": chosen,
        "structured_method": METHODS[chosen] if chosen else None,
        "context_window": window,
        "context_found_by": found_by,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
