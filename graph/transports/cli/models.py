"""`tradegraph models check`: ask the OpenAI-compatible server OPENAI_BASE_URL points at which models it serves and
which structured-output method works for each configured one (agent/model_profiles.py), and keep the profile the
runs use. Exit 0 when a method works for every model checked, 1 when none does for one, 2 for bad input (no
server configured, a model the server does not list)."""

from __future__ import annotations

import json
import os

from agent import model_profiles
from agent.env import ConfigError
from database.embedded import resolve_home
from graph.transports.cli.common import EXIT_FAILED, EXIT_INPUT, EXIT_OK, CliError

model_profiles.install_home(lambda: resolve_home().path)


def register(subparsers) -> None:
    m = subparsers.add_parser("models", help="what an OpenAI-compatible server can do for tradegraph")
    sub = m.add_subparsers(dest="models_command", required=True)
    ck = sub.add_parser(
        "check",
        help="list the server's models, try json_schema, json_object with a schema and "
        "tools on a tiny contract, measure latency and the context window, keep the "
        "profile runs use (in the store's home)",
    )
    ck.add_argument(
        "--model",
        action="append",
        default=None,
        help="a model to check (repeatable; default: the configured quick and deep models)",
    )
    ck.add_argument("--json", action="store_true")
    ck.set_defaults(fn=cmd_check)


def _configured_models() -> list[str]:
    from agent.config import command_config
    from agent.providers import split_model

    settings = command_config()
    names = []
    for name in (settings.quick_model, settings.deep_model):
        provider, model = split_model(name)
        if (provider or settings.provider) == "openai" and model not in names:
            names.append(model)
    return names


def _line(method: str, r: dict) -> str:
    if r["ok"]:
        return f"  {method:<19} ok       {r['latency_s']:.2f} s  {r.get('answer', '')}"
    return f"  {method:<19} refused  {r['latency_s']:.2f} s  HTTP {r['status']}: {r.get('server', '')}"


def cmd_check(args) -> int:
    base, key = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY") or "local"
    if not base:
        raise CliError(
            "OPENAI_BASE_URL is unset: point it at the server's /v1 (e.g. http://127.0.0.1:8000/v1)", code=EXIT_INPUT
        )
    models = args.model or _configured_models()
    if not models:
        raise CliError("no model to check: name one with --model, or set TRADEGRAPH_QUICK_MODEL", code=EXIT_INPUT)
    profiles, failed = [], False
    for model in models:
        try:
            profile = model_profiles.check(base, key, model)
        except ConfigError as e:
            raise CliError(str(e), code=EXIT_INPUT) from None
        path = model_profiles.save(profile)
        profiles.append(profile)
        failed = failed or profile["chosen"] is None
        if not args.json:
            window = profile["context_window"]
            print(f"{model} at {base} (server lists: {', '.join(profile['models'])})")
            for method, r in profile["methods"].items():
                print(_line(method, r))
            print(f"  context window: {window if window else 'unknown'} ({profile['context_found_by']})")
            print(
                f"  runs use: {profile['structured_method'] or 'none: no method answered the probe'}"
                f"  (profile kept in {path})"
            )
    if args.json:
        print(json.dumps(profiles, indent=2))
    return EXIT_FAILED if failed else EXIT_OK
