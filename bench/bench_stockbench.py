"""The full offline StockBench benchmark in one run, and issue 24's three targets measured on it.

20 symbols x the 83 sessions of 2025-03-03..06-30, decided, filled and marked at the open, with the offline model
on a fresh embedded store opened the way the CLI opens one (connect(home=...)); the same driver as `tradegraph
benchmark stockbench` (graph/services/benchmark/stockbench/run.py), timed in its parts. Prints, from that one run:

- elapsed wall time (planning and the data's first load, the run, the scoring with its look-ahead audit) and
  seconds per decision point; CPU seconds of this process (driver, agents, audit writer) and of the embedded
  server; the load average before and after (other work on the machine slows the wall time, not the CPU time);
- LLM calls and tokens (the scorecard's run row), the run's and the buy-and-hold's figures, the look-ahead audit;
- prompt tokens per symbol-decision: every audited request measured as ChatOpenAI would send it (its messages,
  OpenAI's per-message overhead, the tools' and response format's JSON schemas: bench/bench_tokens.py
  `request_tokens` on `wire_body`, o200k where the vocabulary can be had offline, else ~4 bytes a token), a
  point's sum over the symbols it decided; the mean, the worst point, and the worst point's agents;
- the LLM critical path of every decision point (bench/critical_path.py), its maximum.
Targets (issue 24): the whole benchmark <= 60 s on this 2-core machine; <= 8k prompt tokens per symbol-decision;
critical path <= 8 calls at 20 symbols. `--check-estimate` also compares --estimate's projection with the run.
Run: PYTHONPATH=. python bench/bench_stockbench.py [--symbols N] [--end YYYY-MM-DD] [--json] [--check-estimate]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tokens import audited_tokens, counter
from critical_path import critical_path, describe

from database import connect
from graph.services.benchmark.stockbench import run as driver
from graph.services.benchmark.stockbench.protocol import SYMBOLS, Protocol

TARGET_S = 60.0
TARGET_TOKENS = 8_000
TARGET_PATH = 8


def estimate_check(plan, events) -> dict:
    """What --estimate projects for this benchmark against what its run sent, both counted by the estimate's rule
    (graph/services/benchmark/stockbench/estimate.py measure) over the audited requests."""
    from graph.services.benchmark.stockbench.estimate import estimate, measure

    t0 = time.perf_counter()
    est = estimate(plan.protocol, [], None)
    took = round(time.perf_counter() - t0, 1)
    actual = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
    for cycle in measure(events):
        for states in cycle.values():
            for b in states.values():
                for k in actual:
                    actual[k] += b[k]
    row = est["configurations"][0]
    return {
        "dry_run_s": took,
        "actual": actual,
        "estimated": {k: row[k] for k in ("calls", "input_tokens", "output_tokens")},
    }


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def prompt_figures(events: list[dict]) -> dict:
    from itertools import groupby

    tokenizer, count = counter()
    points = audited_tokens(events, count)
    worst = max(points, key=lambda p: p["tokens"] / p["symbols"])
    paths = [critical_path(list(evs)) for _, evs in groupby(events, key=lambda e: e["cycle_id"])]
    deepest = max(paths, key=lambda p: p["total"])
    return {
        "tokenizer": tokenizer,
        "per_symbol_mean": round(sum(p["tokens"] for p in points) / sum(p["symbols"] for p in points)),
        "per_symbol_worst": round(worst["tokens"] / worst["symbols"]),
        "worst_cycle": worst["cycle_id"],
        "worst_by_agent": {
            k: round(v / worst["symbols"]) for k, v in sorted(worst["by_task"].items(), key=lambda kv: -kv[1])
        },
        "critical_path": deepest["total"],
        "critical_path_detail": describe(deepest),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--symbols", type=int, default=len(SYMBOLS), help="the first N of StockBench's 20")
    ap.add_argument("--end", default="2025-06-30", help="last day of the window (default: the paper's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check-estimate", action="store_true", help="compare --estimate's projection with the run")
    args = ap.parse_args()
    os.environ["TRADEGRAPH_LLM"] = "offline"
    os.environ.pop("MONGODB_URI", None)
    protocol = Protocol(symbols=SYMBOLS[: args.symbols], end=args.end)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-stockbench-") as tmp:
        store = connect(home=Path(tmp) / "home")  # as the CLI opens its embedded store
        try:
            from graph.services.backtest.loop import session_id_of

            c0, t0 = time.process_time(), time.perf_counter()
            plan = driver.plan("bench", protocol, [], experiments=Path(tmp) / "exp")
            t1 = time.perf_counter()
            driver.run(plan, store)
            t2, c2 = time.perf_counter(), time.process_time()
            card, _ = driver.score(plan, store, elapsed_s=round(t2 - t0, 1))
            t3, c3 = time.perf_counter(), time.process_time()
            events = store.events.read(session_id_of(plan.episodes[0].episode_id))
            check = estimate_check(plan, events) if args.check_estimate else None
        finally:
            store.close()  # stops the server this store started: its CPU is then this process's children's
    load_after = os.getloadavg()
    prompts = prompt_figures(events)
    run_row = next(r for r in card["rows"] if r["kind"] == "run")
    base = next(r for r in card["rows"] if r["kind"] == "baseline")
    points = len(plan.days)
    out: dict[str, Any] = {
        "symbols": len(protocol.symbols),
        "sessions": points,
        "elapsed_s": round(t3 - t0, 1),
        "plan_s": round(t1 - t0, 1),
        "run_s": round(t2 - t1, 1),
        "score_s": round(t3 - t2, 1),
        "s_per_point": round((t2 - t1) / points, 3),
        "cpu_s": round(c3 - c0, 1),
        "run_cpu_s": round(c2 - c0, 1),
        "cpu_s_per_point": round((c2 - c0) / points, 3),
        "server_cpu_s": round(children_cpu(), 1),
        "load_before": round(load_before[0], 2),
        "load_after": round(load_after[0], 2),
        "target_s": TARGET_S,
        "prompts": prompts,
        "run": {k: v for k, v in run_row.items() if k not in ("nav", "chain_heads")},
        "baseline": {k: base[k] for k in ("cumulative_return", "max_drawdown", "sortino", "sharpe")},
        "lookahead": {k: card["lookahead"][k] for k in ("cycles", "checked", "leaks")},
        "estimate": check,
    }
    if args.json:
        print(json.dumps(out))
        return 0
    ok = lambda met: "met" if met else "NOT met"  # noqa: E731
    print(
        f"StockBench offline: {out['symbols']} symbols x {points} sessions in {out['elapsed_s']} s (plan "
        f"{out['plan_s']} s, run {out['run_s']} s = {out['s_per_point']} s/point, score and look-ahead audit "
        f"{out['score_s']} s); target <= {TARGET_S:g} s: {ok(out['elapsed_s'] <= TARGET_S)}"
    )
    print(
        f"CPU: {out['cpu_s']} s in this process ({out['cpu_s_per_point']} s/point through the run), "
        f"{out['server_cpu_s']} s in the embedded store's server; load average {out['load_before']} before, "
        f"{out['load_after']} after (2 cores)"
    )
    r = out["run"]
    print(
        f"run      {r['name']}: return {r['cumulative_return']:+.4%}, max DD {r['max_drawdown']:.4%}, Sortino "
        f"{r['sortino']:.4f}, Sharpe {r['sharpe']:.2f}, turnover {r['turnover']:.2f}, {r['trades']} trades, fees "
        f"{r['fees']:,.2f}, {r['llm_calls']:,} LLM calls, {r['tokens']:,} tokens, failed points {r['failed_points']}"
    )
    b = out["baseline"]
    print(
        f"baseline equal-weight buy & hold: return {b['cumulative_return']:+.4%}, max DD {b['max_drawdown']:.4%}, "
        f"Sortino {b['sortino']:.5f}"
    )
    la = out["lookahead"]
    print(f"look-ahead audit: {la['leaks']} leak(s) in {la['cycles']} cycles ({la['checked']})")
    p = out["prompts"]
    print(
        f"prompt tokens per symbol-decision ({p['tokenizer']}, schemas included): mean {p['per_symbol_mean']:,}, "
        f"worst point {p['per_symbol_worst']:,} ({p['worst_cycle']}); target <= {TARGET_TOKENS:,}: "
        f"{ok(p['per_symbol_worst'] <= TARGET_TOKENS)}"
    )
    print("  worst point by agent: " + ", ".join(f"{k} {v:,}" for k, v in p["worst_by_agent"].items()))
    print(
        f"LLM critical path, deepest decision point: {p['critical_path_detail']} calls; target <= {TARGET_PATH}: "
        f"{ok(p['critical_path'] <= TARGET_PATH)}"
    )
    if check:
        print(
            f"estimate (dry run {check['dry_run_s']} s) against this run, same token rule: calls "
            f"{check['estimated']['calls']:,} vs {check['actual']['calls']:,}, input tokens "
            f"{check['estimated']['input_tokens']:,} vs {check['actual']['input_tokens']:,}, output tokens "
            f"{check['estimated']['output_tokens']:,} vs {check['actual']['output_tokens']:,}"
        )
    print(
        f"RESULT sb_elapsed_s={out['elapsed_s']} sb_s_per_point={out['s_per_point']} sb_cpu_s={out['cpu_s']} "
        f"sb_server_cpu_s={out['server_cpu_s']} sb_calls={r['llm_calls']} sb_tokens_per_symbol="
        f"{p['per_symbol_worst']} sb_tokens_mean={p['per_symbol_mean']} tokenizer={p['tokenizer']} "
        f"sb_critical_path={p['critical_path']} load={out['load_before']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
