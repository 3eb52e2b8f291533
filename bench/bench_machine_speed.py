"""How fast this machine runs Python right now: one fixed pure-Python loop at a script's top level, timed in CPU
seconds in a process of its own, median of N.

The test suite is CPU-bound, and the same work has cost this 2-core VM from 609 s to 998 s of CPU in one day
(docs/benchmarks.md, "The test suite"): the host's load moves it, with `vmstat` showing no steal. A suite time is
read beside this figure, taken just before and after it. With --python it compares interpreters.
Run: python bench/bench_machine_speed.py [--repeats N] [--python PATH ...]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

# a script's top-level loop (its names are globals, looked up in a dict each time), printing its own CPU seconds
PROBE = """
import time
t = time.process_time()
s = 0
for i in range(20_000_000):
    s += i * i % 7
assert s > 0
print(time.process_time() - t)
"""


def one(python: str) -> float:
    return float(subprocess.run([python, "-c", PROBE], capture_output=True, text=True, check=True).stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--python", nargs="*", default=[sys.executable], help="interpreters to time (default: this one)")
    args = p.parse_args(argv)
    for python in args.python:
        runs = [one(python) for _ in range(args.repeats)]
        print(f"{python}: median {statistics.median(runs):.2f} s of CPU (runs: {', '.join(f'{r:.2f}' for r in runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
