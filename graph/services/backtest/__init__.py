"""Backtests (seed 004): the episode loop (loop.py), the simulation that EXECUTING lands in during an episode (simulation.py), and the equity plot (plot.py)."""
