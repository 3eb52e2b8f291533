"""`python scripts/run_backtest.py ...` is `tradegraph backtest --symbols AAPL,MSFT --start 2011-01-03 --end 2011-12-30 --every 5`: the same function as the CLI."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.kernel.transports.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["backtest", *sys.argv[1:]]))
