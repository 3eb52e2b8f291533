"""Equity curves of a backtest and its equal-weight buy-and-hold, drawdowns shaded (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from agent.metrics import drawdown_series
from graph.services.run_files import save_figure
from schemas.simulation import EpisodeResult


def plot_result(result: EpisodeResult, path: str | Path, title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import pandas as pd

    dates = pd.to_datetime([p.date for p in result.equity_curve])
    agent = [p.equity for p in result.equity_curve]
    bench = [p.equity for p in result.benchmark_curve]
    fig, (ax, axdd) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(dates, agent, label="agent", color="tab:blue", lw=1.4)
    ax.plot(dates, bench, label="equal-weight buy & hold", color="tab:gray", lw=1.2)
    peak = pd.Series(agent).cummax().to_numpy()
    ax.fill_between(dates, agent, peak, where=peak > agent, color="tab:red", alpha=0.25, label="agent drawdown")
    ax.set_ylabel("equity")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    ax.set_title(title or f"backtest {result.episode_id}")
    axdd.fill_between(dates, [-d * 100 for d in drawdown_series(agent)], 0, color="tab:red", alpha=0.4, label="agent")
    axdd.plot(dates, [-d * 100 for d in drawdown_series(bench)], color="tab:gray", lw=1, label="buy & hold")
    axdd.set_ylabel("drawdown %")
    axdd.legend(loc="lower left")
    axdd.grid(alpha=0.3)
    axdd.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m"))
    fig.tight_layout()
    out = save_figure(fig, path, dpi=110)  # never through a link planted in the run folder
    plt.close(fig)
    return out
