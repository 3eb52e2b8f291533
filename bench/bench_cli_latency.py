"""How long the CLI takes to answer with the store already running: `tradegraph --version`, `sessions` and
`portfolio SID`, each a fresh process as a user runs it, median of 5 (after one warm-up run each).

A private home in a temporary folder: `store start` keeps its embedded server running, one offline cycle gives
`portfolio` a session, and `store stop` ends it. Prints one line per command (median and the five runs, seconds)
and the import time of the CLI's module alone. Run: PYTHONPATH=. python bench/bench_cli_latency.py [--repeats N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "graph.transports.cli.main"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRADEGRAPH_", "MONGODB_URI", "OTEL_"))}
    env.update(TRADEGRAPH_HOME=str(home), PYTHONPATH=str(REPO), TRADEGRAPH_LLM="offline")
    return env


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(CLI + args, env=env, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"tradegraph {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return took, done.stdout


def measure(args: list[str], env: dict[str, str], repeats: int) -> list[float]:
    _run(args, env)  # warm-up: the OS's file cache, .pyc files
    return [_run(args, env)[0] for _ in range(repeats)]


def import_time(env: dict[str, str]) -> float:
    code = "import time; t = time.perf_counter(); import graph.transports.cli.main; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    repeats = ap.parse_args().repeats
    with tempfile.TemporaryDirectory(prefix="tg-cli-latency-") as tmp:
        env = _env(Path(tmp) / "home")
        _run(["store", "start"], env)
        try:
            _, out = _run(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--json"], env)
            sid = json.loads(out)["session_id"]
            rows = {name: measure(args, env, repeats) for name, args in
                    (("--version", ["--version"]), ("sessions", ["sessions"]), ("portfolio", ["portfolio", sid]))}
            imports = statistics.median(import_time(env) for _ in range(repeats))
        finally:
            _run(["store", "stop"], env)
    for name, times in rows.items():
        print(f"{name:<10} median {statistics.median(times):.2f} s  ({', '.join(f'{t:.2f}' for t in times)})")
    print(f"import graph.transports.cli.main: median {imports:.2f} s")


if __name__ == "__main__":
    main()
