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
import json
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from critical_path import critical_path, describe  # noqa: E402

from database import connect  # noqa: E402
from graph.runner import run_cycle  # noqa: E402

TARGET_TOKENS = 10_000
TARGET_PATH = 8


def counter():
    """(name, count(bytes) -> int): o200k when its vocabulary can be loaded without a network, else bytes/4."""
    import hashlib
    import tempfile

    import tiktoken

    # where tiktoken caches the vocabulary (tiktoken/load.py): looked up first, so a bench never goes online
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or \
        os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if os.path.exists(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())):
        enc = tiktoken.get_encoding("o200k_base")
        return "o200k", lambda raw: len(enc.encode(raw.decode("utf-8"), disallowed_special=()))
    print(f"note: the o200k vocabulary is not cached in {cache} and is not fetched (offline); counting bytes/4 "
          f"instead (set TIKTOKEN_CACHE_DIR to a directory holding it)")
    return "bytes/4", lambda raw: (len(raw) + 3) // 4


def record_raw(fake) -> list[bytes]:
    """The exact request bodies: the fake parses each one with json.loads in its handler; keep the bytes."""
    import tests.fakes.provider_fake as pf

    raw: list[bytes] = []

    class _Json:
        def __getattr__(self, name):
            return getattr(json, name)

        @staticmethod
        def loads(data, *a, **kw):
            if isinstance(data, (bytes, bytearray)) and data:
                raw.append(bytes(data))
            return json.loads(data, *a, **kw)

    pf.json = _Json()
    return raw


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--symbol", default="AAPL")
    ap.add_argument("--as-of", default="2012-06-01")
    ap.add_argument("--protocol", type=int, default=None,
                    help="run under this pass protocol (agent/passes.py), e.g. 2 to measure the code before protocol 3")
    args = ap.parse_args()
    if args.protocol is not None:
        from agent.passes import use_pass_protocol

        with use_pass_protocol(args.protocol):
            return run(args)
    return run(args)


def run(args) -> None:
    from agent.config import AgentConfig
    from graph.runtime import default_runtime
    from tests.fakes.fake_openai import FakeOpenAI

    name, count = counter()
    with FakeOpenAI() as fake:
        raw = record_raw(fake)
        os.environ.update({"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": fake.base_url})
        for var in ("TRADEGRAPH_LLM", "TRADEGRAPH_QUICK_MODEL", "TRADEGRAPH_DEEP_MODEL"):
            os.environ.pop(var, None)
        store = connect(f"mongomock://bench_tokens_{uuid.uuid4().hex[:8]}")
        out = run_cycle(args.symbol, args.as_of, store=store, runtime=default_runtime(AgentConfig.from_env()))
        events = store.events.read(out.session_id)
        for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
            os.environ.pop(var, None)
    per_request = [count(b) for b in raw]
    total = sum(per_request)
    print(f"one-symbol cycle ({args.symbol} {args.as_of}), ChatOpenAI -> fake_openai: {len(raw)} requests, "
          f"{sum(map(len, raw)):,} bytes")
    print(f"prompt tokens ({name}): total {total:,}; per request median {sorted(per_request)[len(per_request) // 2]:,},"
          f" max {max(per_request):,}; target <= {TARGET_TOKENS:,}: {'MET' if total <= TARGET_TOKENS else 'MISSED'}")
    one = critical_path(events)
    print(f"critical path, 1 symbol: {describe(one)} calls (of {len(raw)})")
    store4 = connect(f"mongomock://bench_tokens4_{uuid.uuid4().hex[:8]}")
    out4 = run_cycle("AAPL,MSFT,IBM,GOOG", args.as_of, store=store4,
                     runtime=default_runtime(AgentConfig.from_env(provider="offline")))
    four = critical_path(store4.events.read(out4.session_id))
    print(f"critical path, 4 symbols: {describe(four)} calls (of {out4.llm_calls}); target <= {TARGET_PATH}: "
          f"{'MET' if max(one['total'], four['total']) <= TARGET_PATH else 'MISSED'}")
    print(f"RESULT prompt_tokens={total} tokenizer={name} requests={len(raw)} critical_path_1={one['total']} "
          f"critical_path_4={four['total']}")


if __name__ == "__main__":
    main()
