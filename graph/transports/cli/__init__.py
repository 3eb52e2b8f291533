"""The `tradegraph` command line: main.py wires the commands; replay, backtest and memory have modules of their own; render.py draws the approval screen."""
