"""What a benchmark would cost before it runs: calls, tokens and dollars per model configuration, projected from a
dry run that sends no request to any provider.

The dry run is a short backtest of the same protocol (same symbols, data, decision time and memory) with the
offline model, on a throwaway store: the window's first few sessions, each point measured, the last one standing
for every later session (by then it carries a portfolio and recalled notes as the real run's points do). Every LLM
request it audits is measured:

- input tokens: the request's messages plus the JSON schemas a provider is also sent (its tools' and its
  structured output's), at ~4 characters per token (agent/offline_model.py `estimate_tokens`, the rule the
  budgets and cost records use: tiktoken's o200k vocabulary is a download this offline tool cannot make);
- output tokens: the offline model's answers to the same requests (JSON of the same contracts), and a worst case
  with every call at its state's output cap (agent/output_caps.py: the cap every request carries, from the
  contracts or TRADEGRAPH_MAX_OUTPUT_TOKENS[_<STATE>]). A real model usually writes more than the offline one, and a reasoning model's hidden
  reasoning is billed as output on top;
- calls: per state and tier (quick or deep), as the offline model made them. A real model may loop through its
  tools more or fewer times, so treat the count as the graph's shape, not a bound.

Projected over the window's sessions and priced per tier from agent/prices.toml (TRADEGRAPH_PRICES over it); a
model without a price is "unknown", never $0. Checked against the full offline run (bench/bench_stockbench.py,
both counted by this rule): 20,425 calls projected for 20,416 made, 18.28M input tokens for 18.53M, 2.40M output
tokens for 2.46M.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any, Optional

from graph.services.benchmark.stockbench.protocol import Protocol
from schemas.events import LlmRequestEvent, LlmRequestPayload, LlmResponseEvent, parse_event

# the first sessions of the window: prompts grow with the notes recalled and the positions held over about the first
# four points and then level off (measured on the shipped data: 31.9k, 37.4k, 43.1k, 45.1k, then 44-45.5k input
# tokens a point for 4 symbols), so the last of these stands for every later session
DRY_RUN_POINTS = 4
TOKENIZER = (
    "~4 characters per token (agent/offline_model.py estimate_tokens), over each request's messages and "
    "the tool and response-format JSON schemas sent with it; tiktoken's o200k vocabulary is a download "
    "and is not used"
)
OUTPUT_ASSUMPTION = (
    "expected: the offline model's answers to the same requests (JSON of the same contracts), "
    "~4 characters per token; worst case: every call at its state's output cap, which every "
    "request carries (agent/output_caps.py; at most {cap} tokens); a reasoning model's hidden "
    "reasoning is billed on top of either"
)
OFFLINE_TIERS = {"offline-quick": "quick", "offline-deep": "deep"}


@contextlib.contextmanager
def throwaway_store(store=None) -> Iterator[Any]:
    """A database of its own on `store`'s server (the embedded one, a MongoDB, or mongomock's memory), dropped
    afterwards; without a store, an in-memory one (mongomock). Nothing of the dry run stays anywhere. The server is
    preferred to mongomock: a 20-symbol point writes ~1,100 audit events, which mongomock stores ten times slower."""
    from database.connection import connect

    name = f"estimate_{uuid.uuid4().hex[:12]}"
    if store is not None:
        uri = _with_database(store.uri, name)
    else:
        try:
            import mongomock  # noqa: F401
        except ImportError:
            raise RuntimeError("an estimate needs a store (or mongomock) to hold its dry run") from None
        uri = f"mongomock://{name}"
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

        from agent.tools import TOOLS

        tool = TOOLS.get(name)
        return estimate_tokens(json.dumps(convert_to_openai_tool(tool))) if tool is not None else 0
    from schemas import ALL_CONTRACTS

    model = ALL_CONTRACTS.get(name)
    return estimate_tokens(json.dumps(model.model_json_schema())) if model is not None else 0


def request_input_tokens(request: LlmRequestPayload) -> int:
    from agent.offline_model import estimate_tokens

    contents = [m.get("content") for m in request.messages]
    text = sum(estimate_tokens(c if isinstance(c, str) else json.dumps(c)) for c in contents)
    tools = sum(_schema_tokens("tool", t) for t in request.tools)
    schema = _schema_tokens("output", request.structured_output) if request.structured_output else 0
    return text + tools + schema


def measure(events: list[dict[str, Any]]) -> list[dict[str, dict[str, dict[str, int]]]]:
    """Per cycle, in order: tier -> state -> {calls, input_tokens, output_tokens} of a dry run's audited traffic,
    read through parse_event (schemas/events.py)."""
    cycles: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for doc in events:
        if doc["kind"] not in ("llm_request", "llm_response"):
            continue  # only the calls are read, and parsed
        e = parse_event(doc)
        if not isinstance(e, (LlmRequestEvent, LlmResponseEvent)):
            continue
        tier = OFFLINE_TIERS.get(e.payload.model or "", "quick")
        bucket = (
            cycles.setdefault(e.cycle_id, {})
            .setdefault(tier, {})
            .setdefault(e.state, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        )
        if isinstance(e, LlmRequestEvent):
            bucket["calls"] += 1
            bucket["input_tokens"] += request_input_tokens(e.payload)
        else:
            bucket["output_tokens"] += e.payload.usage.output_tokens or 0
    return list(cycles.values())


def dry_run(
    protocol: Protocol, data_files, days: list[str], points: int = DRY_RUN_POINTS, store=None
) -> dict[str, Any]:
    """The offline model over the window's first `points` sessions, on a throwaway store and folder."""
    from agent.config import AgentConfig
    from graph.machine.cycle_context import default_services
    from graph.services.backtest.loop import run_backtest, session_id_of
    from graph.services.benchmark.stockbench.run import episode_config_of

    points = max(1, min(points, len(days)))
    settings = AgentConfig.from_env(
        provider="offline",
        quick_model="offline-quick",
        deep_model="offline-deep",
        memory=protocol.memory,
        input_window=protocol.input_window,  # the prompts a run would send: the protocol's news and recall
    )
    # never a budget or a cache in a dry run: it spends nothing and must measure every request
    settings = dataclasses.replace(settings, token_budget=None, max_cost=None, max_llm_calls=None, llm_cache=False)
    run_id = f"estimate-{uuid.uuid4().hex[:8]}"
    folder = tempfile.mkdtemp(prefix="tradegraph-estimate-")
    started = time.monotonic()
    try:
        with throwaway_store(store) as s:
            config = episode_config_of(protocol, run_id, start=days[0], end=days[points - 1])
            result = run_backtest(
                config,
                s,
                progress=False,
                services=default_services(settings, data=data_files),
                out_dir=folder,
                run_id=run_id,
            )
            cycles = measure(s.events.read(session_id_of(run_id)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "points": result.decision_points,
        "dates": [p.date for p in result.equity_curve],
        "seconds": round(time.monotonic() - started, 2),
        "cycles": cycles,
    }


def _window_totals(cycles: list[dict[str, Any]], days: int) -> dict[str, dict[str, dict[str, float]]]:
    """tier -> state -> counts over the whole window: every dry-run point as measured, and each session after them
    as the last one (prompts grow over the first points, with the notes recalled and the positions held, and then
    level off; the first point, with neither, is counted once)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    rest = max(0, days - len(cycles))
    for i, cycle in enumerate(cycles):
        weight = 1 + (rest if i == len(cycles) - 1 else 0)
        for tier, states in cycle.items():
            for state, b in states.items():
                t = out.setdefault(tier, {}).setdefault(
                    state, {"calls": 0.0, "input_tokens": 0.0, "output_tokens": 0.0}
                )
                for k in t:
                    t[k] += b[k] * weight
    return out


def project(
    dry: dict[str, Any], configurations, days: int, symbols: int, output_cap: Optional[int] = None
) -> dict[str, Any]:
    """The dry run's traffic over the window's sessions, priced per configuration and tier."""
    from agent.output_caps import caps_from_env, parse
    from agent.pricing import price_of

    # every request carries its state's output cap (agent/output_caps.py): the worst case is each call at it
    caps = {state: output_cap or cap for state, cap in parse(caps_from_env()).items()}
    cap = max(caps.values())
    window = _window_totals(dry["cycles"], days)
    keys = ("calls", "input_tokens", "output_tokens")
    tiers = {tier: {k: sum(b[k] for b in states.values()) for k in keys} for tier, states in window.items()}
    by_state: dict[str, dict[str, float]] = {}
    for states in window.values():
        for state, b in states.items():
            s = by_state.setdefault(state, dict.fromkeys(keys, 0.0))
            for k in keys:
                s[k] += b[k]
    per_point: dict[str, Any] = {k: round(sum(t[k] for t in tiers.values()) / days, 1) for k in keys}
    per_point["by_state"] = {s: {k: round(v / days, 1) for k, v in b.items()} for s, b in by_state.items()}
    rows = []
    for c in configurations:
        row: dict[str, Any] = {
            "name": c.name,
            "quick_model": c.quick_resolved,
            "deep_model": c.deep_resolved,
            "calls": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "output_tokens_worst": 0,
            "usd": 0.0,
            "usd_worst": 0.0,
            "priced_as": {},
            "unpriced": [],
        }
        for tier, t in tiers.items():
            model = c.quick_resolved if tier == "quick" else c.deep_resolved
            calls, ins, outs = (round(t[k]) for k in keys)
            worst = round(sum(b["calls"] * caps.get(state, cap) for state, b in window[tier].items()))
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
    return {
        "per_point": per_point,
        "configurations": rows,
        "output_cap": cap,
        "output_caps": caps,
        "prompt_tokens_per_symbol_decision": round(per_point["input_tokens"] / max(1, symbols), 1),
    }


def estimate(
    protocol: Protocol,
    models,
    data: Optional[str] = None,
    *,
    points: int = DRY_RUN_POINTS,
    store=None,
    runs: Optional[int] = None,
) -> dict[str, Any]:
    """The estimate of a benchmark as `plan` would run it (same checks on the data, window and symbols, and as
    many runs of each configuration: --runs, else 3 for a provider's model); the models need not be ready to run
    (no key is needed to price them)."""
    from graph.services.benchmark.stockbench.run import days_of, load_data, resolve_models, runs_of

    configurations = resolve_models(models, check_ready=False, temperature=protocol.model_temperature)
    files, market = load_data(data)
    days = days_of(market, protocol)
    dry = dry_run(protocol, files, days, points, store)
    projected = project(dry, configurations, len(days), len(protocol.symbols))
    n = runs_of(configurations, runs)  # plan runs every configuration this many times
    for row in projected["configurations"]:
        row["runs"] = n
        for k in ("calls", "input_tokens", "output_tokens", "output_tokens_worst", "total_tokens"):
            row[k] *= n
        for k in ("usd", "usd_worst"):
            row[k] = None if row[k] is None else round(row[k] * n, 4)
    totals = {k: sum(r[k] for r in projected["configurations"]) for k in ("calls", "input_tokens", "output_tokens")}
    usd = [r["usd"] for r in projected["configurations"]]
    return {
        "benchmark": "stockbench",
        "window": {"start": days[0], "end": days[-1], "sessions": len(days)},
        "symbols": list(protocol.symbols),
        **projected,
        "total": {**totals, "usd": None if None in usd else round(sum(usd), 4)},
        "dry_run": {k: dry[k] for k in ("points", "dates", "seconds")},
        "tokenizer": TOKENIZER,
        "output_assumption": OUTPUT_ASSUMPTION.format(cap=projected["output_cap"]),
        "method": f"a dry run of the first {dry['points']} decision point(s) ({', '.join(dry['dates'])}) with the "
        f"offline model on a throwaway store, no request sent to any provider; each point as measured, "
        f"the last one for each of the other {max(0, len(days) - dry['points'])} sessions",
    }
