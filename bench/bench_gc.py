"""What the CLI's garbage-collector thresholds (GC_THRESHOLDS in graph/transports/gc_tuning.py) save: one offline
cycle (`tradegraph run`) and one short backtest, each a fresh process as a user runs it, with Python's default
thresholds (700, 10, 10) and with the CLI's, alternated, median of N (after one warm-up run each).

A private home in a temporary folder with its embedded store kept running (`store start`), so no run pays for
starting it. Prints per command and setting: the median CPU seconds of the process, the median seconds spent in the
cyclic collector (timed by a gc callback) with how many collections ran, and the tuned/default ratio of the CPU.
Run: PYTHONPATH=. python bench/bench_gc.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the CLI in a process of its own; with "default", main() keeps Python's thresholds (the constant it sets them from
# is replaced before it runs); a gc callback times each collection
DRIVER = """
import gc, json, os, sys, time
spent, runs, started = [0.0], [0], [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.process_time()
    else:
        spent[0] += time.process_time() - started[0]; runs[0] += 1
gc.callbacks.append(timed)
from graph.transports import gc_tuning
from graph.transports.cli import main as cli
if sys.argv[1] == "default":
    gc_tuning.GC_THRESHOLDS = gc.get_threshold()
code = cli.main(sys.argv[2:])
t = os.times()
print(json.dumps({"code": code, "cpu": t.user + t.system, "gc_s": spent[0], "collections": runs[0]}), file=sys.stderr)
"""

COMMANDS = {
    "run": ["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--memory", "off"],
    "backtest": ["backtest", "--symbols", "AAPL,MSFT", "--start", "2012-06-01", "--end", "2012-06-29"],
}


def _once(setting: str, argv: list[str], env: dict[str, str]) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, setting, *argv], env=env, capture_output=True, text=True, timeout=600
    )
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    try:
        got = json.loads(last)
    except json.JSONDecodeError:
        shown = " ".join(argv)
        raise SystemExit(
            f"`tradegraph {shown}` printed no figures (exit {r.returncode}):\n{r.stderr[-2000:]}"
        ) from None
    if got["code"] != 0:
        raise SystemExit(f"`tradegraph {' '.join(argv)}` exited {got['code']}:\n{r.stderr[-2000:]}")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tg-bench-gc-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRADEGRAPH_", "MONGODB_URI", "OTEL_"))}
        env.update(TRADEGRAPH_HOME=tmp, PYTHONPATH=str(REPO), TRADEGRAPH_LLM="offline")
        env["TRADEGRAPH_RUNS_DIR"] = str(Path(tmp) / "runs")
        cli = [sys.executable, "-m", "graph.transports.cli.main"]
        subprocess.run([*cli, "store", "start"], env=env, check=True, capture_output=True)
        try:
            print(f"{'command':10} {'thresholds':18} {'CPU s':>7} {'in gc s':>8} {'collections':>12}")
            for name, command in COMMANDS.items():
                for setting in ("default", "tuned"):
                    _once(setting, command, env)  # warm-up: the OS's file cache, the store's first writes
                seen: dict[str, list[dict]] = {"default": [], "tuned": []}
                for _ in range(args.repeats):
                    for setting in ("default", "tuned"):  # alternated: a slower minute hits both alike
                        seen[setting].append(_once(setting, command, env))
                cpu = {}
                for setting, runs in seen.items():
                    cpu[setting] = statistics.median(r["cpu"] for r in runs)
                    gc_s = statistics.median(r["gc_s"] for r in runs)
                    n = statistics.median(r["collections"] for r in runs)
                    shown = "(700, 10, 10)" if setting == "default" else "GC_THRESHOLDS"
                    print(f"{name:10} {shown:18} {cpu[setting]:7.2f} {gc_s:8.2f} {n:12.0f}")
                print(f"{name:10} tuned/default CPU: {cpu['tuned'] / cpu['default']:.2f}")
        finally:
            subprocess.run([*cli, "store", "stop"], env=env, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
