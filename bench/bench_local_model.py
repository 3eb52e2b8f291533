"""A real model in the loop (issue 31): one cycle and a short StockBench window against the local llama.cpp server
(`make local-model`), reported per state: calls, prompt and output tokens, latency, validation failures, repairs,
the longest answer against its cap, and the outcome. Honest reporting is the point: SmolLM2-135M is tiny and may
fail its contracts often.

    make local-model            # then export the four variables it prints
    .venv/bin/tradegraph models check
    .venv/bin/python bench/bench_local_model.py [--record] [--skip-window]

--record keeps the cycle's session as tests/fixtures/recordings/v1_real_smollm2_cycle.jsonl.gz (the format of
scripts/record_fixtures.py), which tests/unit/test_recorded_sessions.py replays and verifies with zero requests.
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
from graph.machine.runner import run_state_machine  # noqa: E402
from graph.machine.runtime import default_runtime  # noqa: E402
from schemas.base import SCHEMA_VERSION  # noqa: E402

RECORDING = ROOT / "tests" / "fixtures" / "recordings" / "v1_real_smollm2_cycle.jsonl.gz"
WINDOW = {"symbols": "AAPL,MSFT,JPM", "start": "2025-03-03", "end": "2025-03-07"}  # 3 symbols x 5 sessions


def per_state(events: list[dict], caps: dict[str, int]) -> dict[str, dict]:
    rows: dict[str, dict] = defaultdict(lambda: {"calls": 0, "prompt_tokens": 0, "output_tokens": 0, "latency_s": 0.0,
                                                 "validation_failures": 0, "repairs": 0, "errors": 0,
                                                 "longest_answer": 0, "cap": None})
    for e in events:
        p, row = e["payload"], rows[e["state"]]
        row["cap"] = caps.get(e["state"])
        if e["kind"] == "llm_request":
            row["calls"] += 1
        elif e["kind"] == "llm_response":
            usage = p.get("usage") or {}
            row["prompt_tokens"] += int(usage.get("input_tokens") or 0)
            out = int(usage.get("output_tokens") or 0)
            row["output_tokens"] += out
            row["longest_answer"] = max(row["longest_answer"], out)
            row["latency_s"] += (p.get("latency_ms") or 0) / 1000
            row["errors"] += bool(p.get("error"))
        elif e["kind"] == "validation" and p.get("schema"):
            row["validation_failures"] += p.get("ok") is False
            row["repairs"] += int(p.get("attempt") or 1) > 1
    return {s: {**r, "latency_s": round(r["latency_s"], 2)} for s, r in rows.items() if r["calls"]}


def table(rows: dict[str, dict]) -> str:
    head = "| state | calls | prompt tok | output tok | longest / cap | latency s | failed validations | repairs |"
    lines = [head, "|" + "---|" * 8]
    for s, r in rows.items():
        lines.append(f"| {s} | {r['calls']} | {r['prompt_tokens']} | {r['output_tokens']} | {r['longest_answer']} / "
                     f"{r['cap']} | {r['latency_s']} | {r['validation_failures']} | {r['repairs']} |")
    return "\n".join(lines)


def record(store, session_id: str, what: str) -> None:
    events = store.events.read(session_id)
    header = {"fixture": "real_smollm2_cycle", "what": what, "session_id": session_id, "events": len(events),
              "schema_version": SCHEMA_VERSION, "made_by": "bench/bench_local_model.py --record",
              "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(RECORDING, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for line in [header, *events]:
            f.write(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    print(f"recorded {RECORDING.relative_to(ROOT)}: {len(events)} events, {RECORDING.stat().st_size // 1024} KiB")


def one_cycle(symbols: str, as_of: str, keep: bool) -> dict:
    settings = AgentConfig.from_env(llm_cache=False)  # every request sent: this measures the model
    store = connect(f"mongomock://bench_local_{uuid.uuid4().hex[:8]}")
    started = time.monotonic()
    out = run_state_machine(symbols, as_of, store=store, runtime=default_runtime(settings))
    took = round(time.monotonic() - started, 1)
    events = store.events.read(out.session_id)
    rows = per_state(events, parse_caps(settings.output_caps))
    failed = (out.error or {}).get("message") if isinstance(out.error, dict) else out.error
    result = {"what": f"one cycle of {symbols} as of {as_of}", "model": settings.quick_model, "status": out.status,
              "seconds": took, "llm_calls": out.llm_calls, "error": failed, "per_state": rows,
              "session_id": out.session_id}
    if keep:
        record(store, out.session_id, f"one cycle of {symbols} as of {as_of} against {settings.quick_model} on "
                                      f"llama.cpp's server ({os.environ.get('OPENAI_BASE_URL')}): {out.status}")
    return result


def window() -> dict:
    from graph.transports.cli.main import main as cli

    out_dir = ROOT / "out" / "bench" / "local_model_window"
    started = time.monotonic()
    args = ["benchmark", "stockbench", "--symbols", WINDOW["symbols"], "--start", WINDOW["start"], "--end",
            WINDOW["end"], "--runs", "1", "--json", "--db", f"mongomock://bench_sb_{uuid.uuid4().hex[:8]}",
            "--out", str(out_dir), "--benchmark-id", f"local-{uuid.uuid4().hex[:6]}", "--allow-failures", "15",
            "--no-cache"]
    code = cli(args)
    card = sorted(out_dir.glob("*/scorecard.json"), key=lambda p: p.stat().st_mtime)
    scorecard = json.loads(card[-1].read_text()) if card else None
    return {"what": f"StockBench {WINDOW['symbols']} {WINDOW['start']}..{WINDOW['end']}", "exit": code,
            "seconds": round(time.monotonic() - started, 1), "scorecard": scorecard}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--symbols", default="AAPL")
    ap.add_argument("--as-of", default="2012-06-01")
    ap.add_argument("--record", action="store_true", help=f"keep the cycle as {RECORDING.name}")
    ap.add_argument("--skip-window", action="store_true", help="the cycle only")
    args = ap.parse_args()
    if not os.environ.get("OPENAI_BASE_URL"):
        sys.exit("bench_local_model: OPENAI_BASE_URL is unset: `make local-model` prints what to export")
    report = {"cycle": one_cycle(args.symbols, args.as_of, args.record)}
    c = report["cycle"]
    print(f"\n## {c['what']} against {c['model']}: {c['status']} in {c['seconds']} s, {c['llm_calls']} calls"
          + (f"\n   error: {c['error']}" if c["error"] else ""))
    print(table(c["per_state"]))
    if not args.skip_window:
        report["window"] = w = window()
        print(f"\n## {w['what']}: exit {w['exit']} in {w['seconds']} s")
        for row in (w["scorecard"] or {}).get("rows", []):
            print({k: row.get(k) for k in ("name", "return_pct", "max_drawdown_pct", "failed_points", "llm_calls")})
    path = ROOT / "out" / "bench" / "local_model.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwritten {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
