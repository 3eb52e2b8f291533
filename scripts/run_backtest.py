"""`python scripts/run_backtest.py ...` is `tradegraph backtest --symbols AAPL,MSFT --start 2011-01-03 --end 2011-12-30 --every 5`: the same function as the CLI."""

import sys

from _tradegraph import run  # this folder, first on the path when a script is run

if __name__ == "__main__":
    sys.exit(run("backtest"))
