"""StockBench (arXiv 2510.02209) as a tradegraph benchmark: its protocol (protocol.py), the driver that runs it as
backtests (run.py), the dry-run cost estimate (estimate.py) and the scorecard beside the published rows
(scorecard.py). docs/stockbench.md says how to run it and how to read the scorecard."""
