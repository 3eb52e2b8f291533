"""Backtest sweeps: a grid of episodes (universes × windows × configurations), each one a Ray task running
graph.services.backtest.loop.run_backtest, with results and an aggregate per configuration under experiments/{sweep_id}/.

grid.py expands a grid into episodes; episode.py runs one (the Ray task's body, also callable alone);
limits.py is the rate limiter and budget every worker shares; driver.py submits, watches and resumes;
results.py writes the rows, the aggregate and the plot.
"""
