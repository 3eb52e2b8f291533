"""The full offline StockBench benchmark: 20 symbols × the 83 sessions of 2025-03-03..06-30, decided, filled and
marked at the open, with the offline model on a fresh embedded nx-27017 store; the same driver as
`tradegraph benchmark stockbench` (graph/benchmark/stockbench/run.py), timed in its parts.

Prints the elapsed time (planning and the data's first load, the run, the scoring with its look-ahead audit), the
seconds per decision point, the LLM calls, the scorecard's run and baseline rows, and what `--estimate` projects
for the same benchmark against what the run sent (both counted by the estimate's rule). Target (issue 24): the
whole benchmark in <= 60 s on this 2-core machine.
Run: PYTHONPATH=. python bench/bench_stockbench.py [--symbols N] [--end YYYY-MM-DD] [--json] [--no-check-estimate]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from database import connect  # noqa: E402
from database.embedded import start_server, stop_server  # noqa: E402
from graph.benchmark.stockbench import run as driver  # noqa: E402
from graph.benchmark.stockbench.protocol import SYMBOLS, Protocol  # noqa: E402

TARGET_S = 60.0


def estimate_check(plan, store) -> dict:
    """What --estimate projects for this benchmark against what its run sent, both counted by the estimate's rule
    (graph/benchmark/stockbench/estimate.py measure) over the audited requests."""
    from graph.backtest.loop import session_id_of
    from graph.benchmark.stockbench.estimate import estimate, measure

    t0 = time.perf_counter()
    est = estimate(plan.protocol, [], None)
    took = round(time.perf_counter() - t0, 1)
    actual = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
    for cycle in measure(store.events.read(session_id_of(plan.episodes[0].episode_id))):
        for states in cycle.values():
            for b in states.values():
                for k in actual:
                    actual[k] += b[k]
    row = est["configurations"][0]
    return {"dry_run_s": took, "actual": actual,
            "estimated": {k: row[k] for k in ("calls", "input_tokens", "output_tokens")}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--symbols", type=int, default=len(SYMBOLS), help="the first N of StockBench's 20")
    ap.add_argument("--end", default="2025-06-30", help="last day of the window (default: the paper's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-check-estimate", dest="check_estimate", action="store_false",
                    help="skip comparing --estimate's projection with the run")
    args = ap.parse_args()
    os.environ.setdefault("TRADEGRAPH_LLM", "offline")
    protocol = Protocol(symbols=SYMBOLS[:args.symbols], end=args.end)
    with tempfile.TemporaryDirectory(prefix="bench-stockbench-") as tmp:
        home = Path(tmp) / "home"
        port, _ = start_server(home)
        store = connect(f"mongodb://127.0.0.1:{port}/bench")
        try:
            t0 = time.perf_counter()
            plan = driver.plan("bench", protocol, [], experiments=Path(tmp) / "exp")
            t1 = time.perf_counter()
            driver.run(plan, store)
            t2 = time.perf_counter()
            card, _ = driver.score(plan, store, elapsed_s=round(t2 - t0, 1))
            t3 = time.perf_counter()
            check = estimate_check(plan, store) if args.check_estimate else None
        finally:
            store.close()
            stop_server(home)
    run_row = next(r for r in card["rows"] if r["kind"] == "run")
    base = next(r for r in card["rows"] if r["kind"] == "baseline")
    points = len(plan.sessions)
    out = {"symbols": len(protocol.symbols), "sessions": points, "elapsed_s": round(t3 - t0, 1),
           "plan_s": round(t1 - t0, 1), "run_s": round(t2 - t1, 1), "score_s": round(t3 - t2, 1),
           "s_per_point": round((t2 - t1) / points, 2), "target_s": TARGET_S,
           "run": {k: v for k, v in run_row.items() if k not in ("nav", "chain_heads")},
           "baseline": {k: base[k] for k in ("cumulative_return", "max_drawdown", "sortino", "sharpe")},
           "lookahead": {k: card["lookahead"][k] for k in ("cycles", "checked", "leaks")}, "estimate": check}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"StockBench offline: {out['symbols']} symbols x {points} sessions in {out['elapsed_s']} s "
          f"(plan {out['plan_s']} s, run {out['run_s']} s = {out['s_per_point']} s/point, score and look-ahead "
          f"audit {out['score_s']} s); target <= {TARGET_S:g} s: {'met' if out['elapsed_s'] <= TARGET_S else 'NOT met'}")
    r = out["run"]
    print(f"run      {r['name']}: return {r['cumulative_return']:+.4%}, max DD {r['max_drawdown']:.4%}, Sortino "
          f"{r['sortino']:.4f}, Sharpe {r['sharpe']:.2f}, turnover {r['turnover']:.2f}, {r['trades']} trades, fees "
          f"{r['fees']:,.2f}, {r['llm_calls']:,} LLM calls, {r['tokens']:,} tokens, failed points {r['failed_points']}")
    b = out["baseline"]
    print(f"baseline equal-weight buy & hold: return {b['cumulative_return']:+.4%}, max DD {b['max_drawdown']:.4%}, "
          f"Sortino {b['sortino']:.5f}")
    la = out["lookahead"]
    print(f"look-ahead audit: {la['leaks']} leak(s) in {la['cycles']} cycles ({la['checked']})")
    if check:
        print(f"estimate (dry run {check['dry_run_s']} s) against this run, same token rule: calls "
              f"{check['estimated']['calls']:,} vs {check['actual']['calls']:,}, input tokens "
              f"{check['estimated']['input_tokens']:,} vs {check['actual']['input_tokens']:,}, output tokens "
              f"{check['estimated']['output_tokens']:,} vs {check['actual']['output_tokens']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
