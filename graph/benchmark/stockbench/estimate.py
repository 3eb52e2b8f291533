"""What a benchmark would cost before it runs: calls, tokens and dollars per model configuration, projected from a
dry run that sends no request to any provider.

The dry run is a short backtest of the same protocol (same symbols, data, decision time and memory) with the
offline model, on a throwaway store: a few decision points spread over the window (every k-th session), so the
later points carry a portfolio and recalled notes as the real run's do. Every LLM request it audits is measured:

- input tokens: the request's messages plus the JSON schemas a provider is also sent (its tools' and its
  structured output's), at ~4 characters per token (agent/offline_model.py `estimate_tokens`, the rule the
  budgets and cost records use: tiktoken's o200k vocabulary is a download this offline tool cannot make);
- output tokens: the offline model's answers to the same requests (JSON of the same contracts), and a worst case
  with every call at the output cap the budget reserves for it (agent/budget.py DEFAULT_OUTPUT_RESERVE, or the
  model's own max_tokens). A real model usually writes more than the offline one, and a reasoning model's hidden
  reasoning is billed as output on top;
- calls: per state and tier (quick or deep), as the offline model made them. A real model may loop through its
  tools more or fewer times, so treat the count as the graph's shape, not a bound.

Per decision point, averaged over the dry run's points, times the window's sessions, priced per tier from
agent/prices.toml (TRADEGRAPH_PRICES over it); a model without a price is "unknown", never $0.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import shutil
import tempfile
import time
import uuid
from typing import Any, Iterator, Optional

from graph.benchmark.stockbench.protocol import Protocol

DRY_RUN_POINTS = 3
TOKENIZER = ("~4 characters per token (agent/offline_model.py estimate_tokens), over each request's messages and "
             "the tool and response-format JSON schemas sent with it; tiktoken's o200k vocabulary is a download "
             "and is not used")
OUTPUT_ASSUMPTION = ("expected: the offline model's answers to the same requests (JSON of the same contracts), "
                     "~4 characters per token; worst case: every call at the output cap the budget reserves "
                     "({cap} tokens); a reasoning model's hidden reasoning is billed on top of either")
OFFLINE_TIERS = {"offline-quick": "quick", "offline-deep": "deep"}


@contextlib.contextmanager
def throwaway_store(store=None) -> Iterator[Any]:
    """An in-memory store (mongomock) when it is installed; else a database of its own on `store`'s server,
    dropped afterwards. Nothing of the dry run stays anywhere."""
    from database.connection import connect

    name = f"estimate_{uuid.uuid4().hex[:12]}"
    try:
        import mongomock  # noqa: F401
        uri = f"mongomock://{name}"
    except ImportError:
        if store is None:
            raise RuntimeError("an estimate needs mongomock or a store to hold its dry run") from None
        uri = _with_database(store.uri, name)
    s = connect(uri)
    try:
        yield s
    finally:
        s.client.drop_database(name)
        s.close()


def _with_database(uri: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@functools.lru_cache(maxsize=64)
def _schema_tokens(kind: str, name: str) -> int:
    """Tokens of the JSON schema a provider is sent beside the messages: a tool's or a structured output's."""
    from agent.offline_model import estimate_tokens

    if kind == "tool":
        from langchain_core.utils.function_calling import convert_to_openai_tool

        from agent.tools import REGISTRY

        tool = REGISTRY.get(name)
        return estimate_tokens(json.dumps(convert_to_openai_tool(tool))) if tool is not None else 0
    from schemas import ALL_CONTRACTS

    model = ALL_CONTRACTS.get(name)
    return estimate_tokens(json.dumps(model.model_json_schema())) if model is not None else 0


def request_input_tokens(payload: dict[str, Any]) -> int:
    from agent.offline_model import estimate_tokens

    text = sum(estimate_tokens(m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content")))
               for m in payload.get("messages") or [])
    tools = sum(_schema_tokens("tool", t) for t in payload.get("tools") or [])
    schema = _schema_tokens("output", payload["structured_output"]) if payload.get("structured_output") else 0
    return text + tools + schema


def measure(events: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """tier -> state -> {calls, input_tokens, output_tokens} of a dry run's audited LLM traffic."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for e in events:
        if e["kind"] not in ("llm_request", "llm_response"):
            continue
        p = e["payload"]
        tier = OFFLINE_TIERS.get(p.get("model"), "quick")
        bucket = out.setdefault(tier, {}).setdefault(e["state"], {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        if e["kind"] == "llm_request":
            bucket["calls"] += 1
            bucket["input_tokens"] += request_input_tokens(p)
        else:
            bucket["output_tokens"] += int((p.get("usage") or {}).get("output_tokens") or 0)
    return out


def dry_run(protocol: Protocol, data_files, sessions: list[str], points: int = DRY_RUN_POINTS,
            store=None) -> dict[str, Any]:
    """The offline model over `points` sessions spread across the window, on a throwaway store and folder."""
    from agent.config import AgentConfig
    from graph.backtest.loop import run_backtest, session_id_of
    from graph.benchmark.stockbench.run import episode_config_of
    from graph.runtime import default_runtime

    points = max(1, min(points, len(sessions)))
    every = max(1, math.ceil(len(sessions) / points))
    settings = AgentConfig.from_env(provider="offline", quick_model="offline-quick", deep_model="offline-deep",
                                    memory=protocol.memory)
    # never a budget or a cache in a dry run: it spends nothing and must measure every request
    settings = dataclasses.replace(settings, token_budget=None, max_cost=None, max_llm_calls=None, llm_cache=False)
    run_id = f"estimate-{uuid.uuid4().hex[:8]}"
    folder = tempfile.mkdtemp(prefix="tradegraph-estimate-")
    started = time.monotonic()
    try:
        with throwaway_store(store) as s:
            config = episode_config_of(protocol, run_id, every=every, start=sessions[0], end=sessions[-1])
            result = run_backtest(config, s, progress=False, runtime=default_runtime(settings, data=data_files),
                                  out_dir=folder, run_id=run_id)
            measured = measure(s.events.read(session_id_of(run_id)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"points": result.decision_points, "dates": [p.date for p in result.equity_curve],
            "seconds": round(time.monotonic() - started, 2), "by_tier": measured}


def project(dry: dict[str, Any], configurations, sessions: int, symbols: int,
            output_cap: Optional[int] = None) -> dict[str, Any]:
    """The dry run's per-point traffic times `sessions`, priced per configuration and tier."""
    from agent.budget import DEFAULT_OUTPUT_RESERVE
    from agent.pricing import price_of

    cap = output_cap or DEFAULT_OUTPUT_RESERVE
    per_point: dict[str, Any] = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "by_state": {}}
    tiers: dict[str, dict[str, float]] = {}
    n = max(1, dry["points"])
    for tier, states in dry["by_tier"].items():
        t = tiers.setdefault(tier, {"calls": 0.0, "input_tokens": 0.0, "output_tokens": 0.0})
        for state, b in states.items():
            s = per_point["by_state"].setdefault(state, {"calls": 0.0, "input_tokens": 0.0, "output_tokens": 0.0})
            for k in ("calls", "input_tokens", "output_tokens"):
                s[k] += b[k] / n
                t[k] += b[k] / n
    for k in ("calls", "input_tokens", "output_tokens"):
        per_point[k] = round(sum(t[k] for t in tiers.values()), 1)
    per_point["by_state"] = {s: {k: round(v, 1) for k, v in b.items()} for s, b in per_point["by_state"].items()}
    rows = []
    for c in configurations:
        row: dict[str, Any] = {"name": c.name, "quick_model": c.quick_resolved, "deep_model": c.deep_resolved,
                               "calls": 0, "input_tokens": 0, "output_tokens": 0, "output_tokens_worst": 0,
                               "usd": 0.0, "usd_worst": 0.0, "priced_as": {}, "unpriced": []}
        for tier, t in tiers.items():
            model = c.quick_resolved if tier == "quick" else c.deep_resolved
            calls, ins, outs = (round(t[k] * sessions) for k in ("calls", "input_tokens", "output_tokens"))
            worst = calls * cap
            row["calls"] += calls
            row["input_tokens"] += ins
            row["output_tokens"] += outs
            row["output_tokens_worst"] += worst
            priced_as, price = price_of(model)
            row["priced_as"][tier] = priced_as
            if price is None:
                row["unpriced"].append(model)
                continue
            row["usd"] += (ins * price.input + outs * price.output) / 1e6
            row["usd_worst"] += (ins * price.input + worst * price.output) / 1e6
        if row["unpriced"]:  # an unknown price is never $0
            row["usd"] = row["usd_worst"] = None
        else:
            row["usd"], row["usd_worst"] = round(row["usd"], 4), round(row["usd_worst"], 4)
        row["total_tokens"] = row["input_tokens"] + row["output_tokens"]
        rows.append(row)
    return {"per_point": per_point, "configurations": rows, "output_cap": cap,
            "prompt_tokens_per_symbol_decision": round(per_point["input_tokens"] / max(1, symbols), 1)}


def estimate(protocol: Protocol, models, data: Optional[str] = None, *, points: int = DRY_RUN_POINTS,
             store=None) -> dict[str, Any]:
    """The estimate of a benchmark as `plan` would run it (same checks on the data, window and symbols); the
    models need not be ready to run (no key is needed to price them)."""
    from graph.benchmark.stockbench.run import load_data, resolve_models, sessions_of

    configurations = resolve_models(models, check_ready=False)
    files, market = load_data(data)
    sessions = sessions_of(market, protocol)
    dry = dry_run(protocol, files, sessions, points, store)
    projected = project(dry, configurations, len(sessions), len(protocol.symbols))
    totals = {k: sum(r[k] for r in projected["configurations"]) for k in ("calls", "input_tokens", "output_tokens")}
    usd = [r["usd"] for r in projected["configurations"]]
    return {"benchmark": "stockbench", "window": {"start": sessions[0], "end": sessions[-1], "sessions": len(sessions)},
            "symbols": list(protocol.symbols), **projected,
            "total": {**totals, "usd": None if None in usd else round(sum(usd), 4)},
            "dry_run": {k: dry[k] for k in ("points", "dates", "seconds")},
            "tokenizer": TOKENIZER, "output_assumption": OUTPUT_ASSUMPTION.format(cap=projected["output_cap"]),
            "method": f"a dry run of {dry['points']} decision point(s) ({', '.join(dry['dates'])}) with the offline "
                      f"model on a throwaway store: no request is sent to any provider; per point, times "
                      f"{len(sessions)} sessions"}
