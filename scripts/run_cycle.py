"""Run one cycle: `python scripts/run_cycle.py --symbols AAPL,MSFT --as-of 2012-06-01 [--db URI] [--json]`.

The same function as `tradegraph run`.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.kernel.transports.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
