"""`make bench`: every issue-14 measure, the issue-15 sweep scaling and issue 24's StockBench targets in one run,
then one table of its RESULT lines against the targets.

Each script runs in its own process (its own embedded server, no warm caches shared), its output streamed as
it comes; the table at the end reads only the `RESULT k=v …` line each one prints last.
Run: .venv/bin/python bench/run_all.py [--quick]   (--quick: replay at 1k/10k only, fewer repeats)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> dict[str, str]:
    print(f"\n$ {script} {' '.join(args)}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    result: dict[str, str] = {}
    assert proc.stdout is not None  # stdout=PIPE
    for line in proc.stdout:
        print("  " + line.rstrip(), flush=True)
        if line.startswith("RESULT "):
            result = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    if proc.wait() != 0:
        print(f"  ({script} exited {proc.returncode})")
    return result


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "MISSED")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = "1000,10000" if args.quick else "1000,10000,100000"
    cyc = run("bench_cycle.py", "--repeats", "1" if args.quick else "2")
    rep = run("bench_replay.py", "--sizes", sizes, "--repeats", "3")
    bt = run("bench_backtest.py", "--points", "20" if args.quick else "60")
    feat = run("bench_features.py")
    tok = run("bench_tokens.py")
    sw = run("bench_sweep.py", "--repeats", "1" if args.quick else "3")
    # the full window is the target's; --quick runs its first two weeks (the time then says nothing of the target)
    sb = run("bench_stockbench.py", *(["--end", "2025-03-14"] if args.quick else []))

    def f(d: dict, k: str) -> float | None:
        try:
            return float(d[k].lstrip("x"))
        except (KeyError, ValueError):
            return None

    rows = []
    ratio = f(cyc, "ratio")
    rows.append(
        (
            "cycle audit on / off (4 symbols)",
            f"{cyc.get('audit_on_ms', '?')} / {cyc.get('audit_off_ms', '?')} ms = {cyc.get('ratio', '?')}x",
            "<= 1.3x",
            verdict(None if ratio is None else ratio <= 1.3),
        )
    )
    t10k = f(rep, "reconstruct_10000_s")
    rows.append(
        (
            "replay reconstruct 10k events",
            f"{rep.get('reconstruct_10000_s', '?')} s",
            "<= 1 s",
            verdict(None if t10k is None else t10k <= 1.0),
        )
    )
    growth = [g for g in (f(rep, k) for k in sorted(k for k in rep if k.startswith("growth_"))) if g is not None]
    unread = any(f(rep, k) is None for k in rep if k.startswith("growth_"))
    rows.append(
        (
            f"replay growth per x10 ({sizes.replace(',', ' -> ')})",
            ", ".join(f"x{g:.1f}" for g in growth) or "?",
            "<= x11 each",
            verdict(None if not growth or unread else all(g <= 11 for g in growth)),
        )
    )
    pps = f(bt, "points_per_s")
    rows.append(
        (
            "backtest decision points/s (4 symbols)",
            f"{bt.get('points_per_s', '?')}/s",
            ">= 10/s",
            verdict(None if pps is None else pps >= 10),
        )
    )
    full = f(feat, "full_history_s")
    rows.append(
        (
            "indicators 100 symbols x 2,500 bars",
            f"{feat.get('full_history_s', '?')} s",
            "<= 0.5 s",
            verdict(None if full is None else full <= 0.5),
        )
    )
    toks = f(tok, "prompt_tokens")
    rows.append(
        (
            f"prompt tokens, one-symbol cycle ({tok.get('tokenizer', '?')})",
            f"{tok.get('prompt_tokens', '?')} over {tok.get('requests', '?')} requests",
            "<= 10k",
            verdict(None if toks is None else toks <= 10_000),
        )
    )
    paths = [p for p in (f(tok, "critical_path_1"), f(tok, "critical_path_4")) if p is not None]
    rows.append(
        (
            "LLM critical path (1 / 4 symbols)",
            f"{tok.get('critical_path_1', '?')} / {tok.get('critical_path_4', '?')} calls",
            "<= 8",
            verdict(None if len(paths) < 2 else max(paths) <= 8),
        )
    )
    width = max(len(r[0]) for r in rows)
    print("\nissue 14 targets")
    for name, now, target, ok in rows:
        print(f"  {name:<{width}}  {now:<28} {target:<12} {ok}")
    sb_rows = []
    elapsed = f(sb, "sb_elapsed_s")
    sb_rows.append(
        (
            "StockBench offline, 20 symbols x 83 sessions"
            if not args.quick
            else "StockBench offline, 20 symbols, 2025-03-03..03-14",
            f"{sb.get('sb_elapsed_s', '?')} s ({sb.get('sb_s_per_point', '?')} s/point, load {sb.get('load', '?')})",
            "<= 60 s",
            verdict(None if elapsed is None or args.quick else elapsed <= 60),
        )
    )
    per_symbol = f(sb, "sb_tokens_per_symbol")
    sb_rows.append(
        (
            f"prompt tokens per symbol-decision ({sb.get('tokenizer', '?')}), worst point",
            f"{sb.get('sb_tokens_per_symbol', '?')} (mean {sb.get('sb_tokens_mean', '?')})",
            "<= 8k",
            verdict(None if per_symbol is None else per_symbol <= 8_000),
        )
    )
    path = f(sb, "sb_critical_path")
    sb_rows.append(
        (
            "LLM critical path, 20 symbols",
            f"{sb.get('sb_critical_path', '?')} calls",
            "<= 8",
            verdict(None if path is None else path <= 8),
        )
    )
    width = max(len(r[0]) for r in sb_rows)
    print("\nissue 24 targets (bench/bench_stockbench.py)")
    for name, now, target, ok in sb_rows:
        print(f"  {name:<{width}}  {now:<36} {target:<8} {ok}")
    print("\nissue 15 measures (8-episode sweep, offline model, one embedded store)")
    print(
        f"  episodes/s with 1 / 2 workers   {sw.get('episodes_per_s_1', '?')} / {sw.get('episodes_per_s_2', '?')}"
        f"  (scaling efficiency {sw.get('efficiency', '?')})"
    )
    print(
        f"  audit per decision point        {sw.get('events_per_point', '?')} events, {sw.get('kb_per_point', '?')} KB"
    )


if __name__ == "__main__":
    main()
