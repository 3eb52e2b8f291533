"""Run one cycle: `python scripts/run_cycle.py --symbols AAPL,MSFT --as-of 2012-06-01 [--db URI] [--json]`.

The same function as `tradegraph run`.
"""

import sys

from _tradegraph import run  # this folder, first on the path when a script is run

if __name__ == "__main__":
    sys.exit(run("run"))
