"""A real model in the loop (issue 31): one cycle and a short StockBench window against the local llama.cpp server
(`make local-model`), reported per state: calls, prompt and output tokens, latency, validation failures, repairs,
the longest answer against its cap, and the outcome. Honest reporting is the point: SmolLM2-135M is tiny and may
fail its contracts often.

    make local-model            # then export the four variables it prints
    .venv/bin/tradegraph models check
    TRADEGRAPH_LLM_TIMEOUT=600 TRADEGRAPH_MAX_OUTPUT_TOKENS=384 \
        nice -n 5 .venv/bin/python bench/bench_local_model.py [--record] [--skip-window]

On a loaded two-core machine the server writes a few tokens a second, so a request's 60 s default timeout is too
short for an answer of a hundred tokens, and the contracts' default caps (up to 2,048 tokens) let a runaway answer
hold the single-slot server for minutes: the figures in docs/benchmarks.md were measured with the settings above
(both recorded in the manifest, and printed as the run's setup).

Every run's cycle is kept as out/bench/local_model_runs/cycle_<session>.jsonl.gz; --record also makes it
tests/fixtures/recordings/v1_real_smollm2_cycle.jsonl.gz (the format of scripts/record_fixtures.py), which
tests/unit/test_recorded_sessions.py replays and verifies with zero requests.
The report is printed and written to out/bench/local_model.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.config import AgentConfig  # noqa: E402
from agent.output_caps import parse as parse_caps  # noqa: E402
from database.connection import connect  # noqa: E402
from graph.machine.cycle_context import default_services  # noqa: E402
from graph.machine.runner import run_state_machine  # noqa: E402
from schemas.base import SCHEMA_VERSION  # noqa: E402
from schemas.events import LlmRequestEvent, LlmResponseEvent, ManifestEvent, ValidationEvent, parse_all  # noqa: E402

RECORDING = ROOT / "tests" / "fixtures" / "recordings" / "v1_real_smollm2_cycle.jsonl.gz"
RUNS = ROOT / "out" / "bench" / "local_model_runs"
WINDOW = {"symbols": "AAPL,MSFT,JPM", "start": "2025-03-03", "end": "2025-03-07"}  # 3 symbols x 5 sessions


def per_state(events: list[dict], caps: dict[str, int]) -> dict[str, dict]:
    """Each state's calls, tokens, latency, failed validations and repairs, read from its events as typed
    (schemas/events.py): an event this code cannot read stops the benchmark, naming it."""
    typed, refused = parse_all(events)
    if refused:
        raise SystemExit("bench_local_model: unreadable events: " + "; ".join(refused))
    rows: dict[str, dict] = defaultdict(
        lambda: {
            "calls": 0,
            "prompt_tokens": 0,
            "output_tokens": 0,
            "latency_s": 0.0,
            "validation_failures": 0,
            "repairs": 0,
            "errors": 0,
            "longest_answer": 0,
            "cap": None,
        }
    )
    for e in typed:
        row = rows[e.state]
        row["cap"] = caps.get(e.state)
        if isinstance(e, LlmRequestEvent):
            row["calls"] += 1
        elif isinstance(e, LlmResponseEvent):
            p = e.payload
            row["prompt_tokens"] += p.usage.input_tokens or 0
            out = p.usage.output_tokens or 0
            row["output_tokens"] += out
            row["longest_answer"] = max(row["longest_answer"], out)
            row["latency_s"] += (p.latency_ms or 0) / 1000
            row["errors"] += bool(p.error)
        elif isinstance(e, ValidationEvent) and e.payload.schema_:
            row["validation_failures"] += not e.payload.ok
            row["repairs"] += int(getattr(e.payload, "attempt", None) or 1) > 1  # an open payload's extra field
    return {s: {**r, "latency_s": round(r["latency_s"], 2)} for s, r in rows.items() if r["calls"]}


def table(rows: dict[str, dict]) -> str:
    head = "| state | calls | prompt tok | output tok | longest / cap | latency s | failed validations | repairs |"
    lines = [head, "|" + "---|" * 8]
    for s, r in rows.items():
        lines.append(
            f"| {s} | {r['calls']} | {r['prompt_tokens']} | {r['output_tokens']} | {r['longest_answer']} / "
            f"{r['cap']} | {r['latency_s']} | {r['validation_failures']} | {r['repairs']} |"
        )
    return "\n".join(lines)


def record(store, session_id: str, what: str, path: Path) -> None:
    events = store.events.read(session_id)
    header = {
        "fixture": "real_smollm2_cycle",
        "what": what,
        "session_id": session_id,
        "events": len(events),
        "schema_version": SCHEMA_VERSION,
        "made_by": "bench/bench_local_model.py --record",
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for line in [header, *events]:
            f.write(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    print(f"recorded {path.relative_to(ROOT)}: {len(events)} events, {path.stat().st_size // 1024} KiB")


def one_cycle(symbols: str, as_of: str, keep: bool) -> dict:
    settings = AgentConfig.from_env(llm_cache=False)  # every request sent: this measures the model
    store = connect(f"mongomock://bench_local_{uuid.uuid4().hex[:8]}")
    started = time.monotonic()
    out = run_state_machine(symbols, as_of, store=store, services=default_services(settings))
    took = round(time.monotonic() - started, 1)
    events = store.events.read(out.session_id)
    rows = per_state(events, parse_caps(settings.output_caps))
    failed = (out.error or {}).get("message") if isinstance(out.error, dict) else out.error
    manifest = next(e for e in parse_all(events)[0] if isinstance(e, ManifestEvent))
    models = manifest.payload.models or {}
    setup = {
        "timeout_s": settings.retry.timeout_s,
        "output_caps": settings.output_caps,
        "structured_method": {t: m.get("structured_method") for t, m in models.items()},
        "concurrency": {t: m.get("concurrency") for t, m in models.items()},
    }
    result = {
        "what": f"one cycle of {symbols} as of {as_of}",
        "model": settings.quick_model,
        "status": out.status,
        "seconds": took,
        "llm_calls": out.llm_calls,
        "error": failed,
        "per_state": rows,
        "session_id": out.session_id,
        "setup": setup,
    }
    what = (
        f"one cycle of {symbols} as of {as_of} against {settings.quick_model} on llama.cpp's server "
        f"({os.environ.get('OPENAI_BASE_URL')}): {out.status}"
    )
    # every run is kept under out/; --record makes it the fixture make test replays
    record(store, out.session_id, what, RUNS / f"cycle_{out.session_id}.jsonl.gz")
    if keep:
        record(store, out.session_id, what, RECORDING)
    return result


def window(db: str | None) -> dict:
    from graph.transports.cli.main import main as cli

    out_dir = ROOT / "out" / "bench" / "local_model_window"
    started = time.monotonic()
    # the store: an in-memory one by default; --window-db embedded keeps it in TRADEGRAPH_HOME's embedded store, so
    # the sessions of a window stopped for time can still be read (tradegraph sessions, replay)
    store = [] if db == "embedded" else ["--db", db or f"mongomock://bench_sb_{uuid.uuid4().hex[:8]}"]
    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        WINDOW["symbols"],
        "--start",
        WINDOW["start"],
        "--end",
        WINDOW["end"],
        "--runs",
        "1",
        "--json",
        *store,
        "--out",
        str(out_dir),
        "--benchmark-id",
        f"local-{uuid.uuid4().hex[:6]}",
        "--allow-failures",
        "15",
        "--no-cache",
    ]
    code = cli(args)
    card = sorted(out_dir.glob("*/scorecard.json"), key=lambda p: p.stat().st_mtime)
    scorecard = json.loads(card[-1].read_text()) if card else None
    return {
        "what": f"StockBench {WINDOW['symbols']} {WINDOW['start']}..{WINDOW['end']}",
        "exit": code,
        "seconds": round(time.monotonic() - started, 1),
        "scorecard": scorecard,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--symbols", default="AAPL")
    ap.add_argument("--as-of", default="2012-06-01")
    ap.add_argument("--record", action="store_true", help=f"keep the cycle as {RECORDING.name}")
    ap.add_argument("--skip-window", action="store_true", help="the cycle only")
    ap.add_argument("--skip-cycle", action="store_true", help="the window only")
    ap.add_argument("--window-db", help="the window's store: a URI, or 'embedded' (default: in memory)")
    args = ap.parse_args()
    if not os.environ.get("OPENAI_BASE_URL"):
        sys.exit("bench_local_model: OPENAI_BASE_URL is unset: `make local-model` prints what to export")
    report: dict = {}
    if not args.skip_cycle:
        report["cycle"] = c = one_cycle(args.symbols, args.as_of, args.record)
        print(
            f"\n## {c['what']} against {c['model']}: {c['status']} in {c['seconds']} s, {c['llm_calls']} calls"
            + (f"\n   error: {c['error']}" if c["error"] else "")
            + f"\n   setup: {c['setup']}"
        )
        print(table(c["per_state"]))
    if not args.skip_window:
        report["window"] = w = window(args.window_db)
        print(f"\n## {w['what']}: exit {w['exit']} in {w['seconds']} s")
        for row in (w["scorecard"] or {}).get("rows", []):
            if row["kind"] == "published":
                continue  # the paper's rows, as published: the scorecard in the report holds them

            def pct(v: float | None) -> str:
                return "—" if v is None else f"{v * 100:+.3f}%"

            print(
                f"  {row['name']}: return {pct(row.get('cumulative_return'))}, max drawdown "
                f"{pct(row.get('max_drawdown'))}, trades {row.get('trades')}, failed points "
                f"{row.get('failed_points')}, LLM calls {row.get('llm_calls')}, tokens {row.get('tokens')}"
            )
    path = ROOT / "out" / "bench" / "local_model.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwritten {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
