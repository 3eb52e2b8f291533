"""How long the CLI takes to answer with the store already running: `tradegraph --version`, `sessions` and
`portfolio SID`, each a fresh process as a user runs it, median of 5 (after one warm-up run each).

A private home in a temporary folder: `store start` keeps its embedded server running, one offline cycle gives
`portfolio` a session, and `store stop` ends it. Prints one line per command (median and the five runs, wall
seconds; the median CPU seconds the process used; the median against `--version`'s, which on a shared machine moves
less than the seconds do) and the import time of the CLI's module alone.
Run: PYTHONPATH=. python bench/bench_cli_latency.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _run(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process, what it printed)."""
    cpu0, t0 = _cpu(), time.perf_counter()
    done = subprocess.run(CLI + args, env=env, capture_output=True, text=True, timeout=300)
    took, cpu = time.perf_counter() - t0, _cpu() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"tradegraph {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return took, cpu, done.stdout


def measure(args: list[str], env: dict[str, str], repeats: int) -> list[tuple[float, float]]:
    _run(args, env)  # warm-up: the OS's file cache, .pyc files
    return [_run(args, env)[:2] for _ in range(repeats)]


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
            _, _, out = _run(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--json"], env)
            sid = json.loads(out)["session_id"]
            rows = {
                name: measure(args, env, repeats)
                for name, args in (
                    ("--version", ["--version"]),
                    ("sessions", ["sessions"]),
                    ("portfolio", ["portfolio", sid]),
                )
            }
            imports = statistics.median(import_time(env) for _ in range(repeats))
        finally:
            _run(["store", "stop"], env)
    version = statistics.median(wall for wall, _ in rows["--version"])
    for name, runs in rows.items():
        walls = [wall for wall, _ in runs]
        wall = statistics.median(walls)
        print(
            f"{name:<10} median {wall:.2f} s  ({', '.join(f'{t:.2f}' for t in walls)})  "
            f"cpu {statistics.median(cpu for _, cpu in runs):.2f} s  x{wall / version:.1f} --version"
        )
    print(f"import graph.transports.cli.main: median {imports:.2f} s")


if __name__ == "__main__":
    main()
