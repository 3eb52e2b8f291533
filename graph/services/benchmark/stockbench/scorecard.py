"""The StockBench scorecard: tradegraph's run(s), the equal-weight buy-and-hold on the same data and the published
rows as published, scored with StockBench's own metrics (agent.metrics.stockbench_metrics), written as
scorecard.json, scorecard.csv and scorecard.png.

Every run row carries what it takes to check it: its session ids and each session's chain head, so anyone can
`tradegraph replay SESSION --verify` the decisions behind the figures.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from agent.metrics import equal_weight_buy_and_hold, stockbench_metrics, turnover
from graph.services.benchmark.stockbench.protocol import Protocol, published
from graph.services.run_files import save_figure, write_run_atomic
from schemas.simulation import EpisodeResult

FILES = ("scorecard.json", "scorecard.csv", "scorecard.png")
CSV_COLUMNS = (
    "name",
    "kind",
    "cumulative_return",
    "max_drawdown",
    "sortino",
    "sharpe",
    "turnover",
    "trades",
    "fees",
    "llm_calls",
    "tokens",
    "usd",
    "failed_points",
    "excess_mean",
    "excess_ci95_low",
    "excess_ci95_high",
    "excess_p_value",
    "may_have_seen_window",
    "gross_cumulative_return",
    "runs",
    "cumulative_return_std",
    "max_drawdown_std",
    "sortino_std",
    "temperature",
    "session_ids",
    "chain_heads",
)


@dataclass(frozen=True)
class RunRecord:
    """One tradegraph run of the protocol: its name (the model configuration), result and audit trail."""

    name: str
    result: EpisodeResult
    session_ids: tuple[str, ...]
    chain_heads: tuple[Optional[dict[str, Any]], ...]


def run_row(run: RunRecord, initial_cash: float) -> dict[str, Any]:
    nav = [{"date": p.date, "equity": round(p.equity, 2)} for p in run.result.equity_curve]
    equity = [p.equity for p in run.result.equity_curve]
    trades = run.result.trade_history.trades
    cost = run.result.llm_cost or {}
    return {
        "name": run.name,
        "kind": "run",
        **stockbench_metrics(equity, initial_cash),
        "turnover": turnover(trades, equity) if equity else 0.0,
        "trades": len(trades),
        "fees": round(sum(t.fees for t in trades), 2),
        "llm_calls": int(cost.get("calls") or 0),
        "tokens": int(cost.get("total_tokens") or 0),
        "usd": _usd(cost),
        "failed_points": len(run.result.failed_points),
        "session_ids": list(run.session_ids),
        "chain_heads": list(run.chain_heads),
        "nav": nav,
    }


def _usd(cost: dict[str, Any]) -> Optional[float]:
    """Dollars, or None when some call had no price: an unknown is never printed as $0."""
    if int(cost.get("unknown_cost_calls") or 0):
        return None
    return round(float(cost.get("usd") or 0.0), 6)


def baseline_row(dates: Sequence[str], prices: Mapping[str, Sequence[float]], protocol: Protocol) -> dict[str, Any]:
    """StockBench's passive baseline on the same data and dates: equal dollars in every symbol at the first
    session's open, its commission and slippage paid once on the way in, held. Its metrics are the NAV's against the
    cash it starts with, as a run's are (so they recompute from the NAV it ships, entry cost included); StockBench's
    own scoring (its `extract_key_metrics_summary`: returns against the first point, the entry cost left out) is
    kept in the gross_* columns."""
    curve = equal_weight_buy_and_hold(prices, protocol.initial_cash, protocol.fees_bps + protocol.slippage_bps)
    gross = stockbench_metrics(curve)
    return {
        "name": "Equal-weight buy & hold (this data)",
        "kind": "baseline",
        **stockbench_metrics(curve, protocol.initial_cash),
        **{f"gross_{k}": gross[k] for k in ("cumulative_return", "max_drawdown", "sortino")},
        "turnover": None,
        "trades": len(prices),
        "fees": None,
        "llm_calls": 0,
        "tokens": 0,
        "usd": 0.0,
        "failed_points": 0,
        "session_ids": [],
        "chain_heads": [],
        "nav": [{"date": d, "equity": round(v, 2)} for d, v in zip(dates, curve)],
    }


def published_rows() -> list[dict[str, Any]]:
    return [
        {
            "name": r["name"],
            "kind": "published",
            "cumulative_return": r["cumulative_return"],
            "max_drawdown": r["max_drawdown"],
            "sortino": r["sortino"],
            "rank": r["rank"],
        }
        for r in published()["rows"]
    ]


def build(
    protocol: Protocol,
    dates: Sequence[str],
    runs: list[dict[str, Any]],
    baseline: dict[str, Any],
    *,
    elapsed_s: Optional[float] = None,
    lookahead: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """The scorecard document (`--json` prints it): the window, the symbols and every row, runs first."""
    source = published()
    return {
        "benchmark": "stockbench",
        "window": {
            "start": dates[0] if dates else protocol.start,
            "end": dates[-1] if dates else protocol.end,
            "sessions": len(dates),
        },
        "symbols": list(protocol.symbols),
        "rows": runs + [baseline] + published_rows(),
        "published_source": source["source"],
        "published_caveat": source["caveat"],
        "departures": protocol.departures(),
        "elapsed_s": elapsed_s,
        "lookahead": lookahead,
    }


def csv_text(card: dict[str, Any]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in card["rows"]:
        flat = dict(row)
        flat["session_ids"] = " ".join(row.get("session_ids") or [])
        flat["chain_heads"] = " ".join(f"{h['seq']}:{h['hash'][:16]}" for h in row.get("chain_heads") or [] if h)
        test = row.get("vs_buy_and_hold") or {}
        ci = test.get("ci95") or [None, None]
        flat.update(
            excess_mean=test.get("mean"),
            excess_ci95_low=ci[0],
            excess_ci95_high=ci[1],
            excess_p_value=test.get("p_value"),
        )
        w.writerow(flat)
    return out.getvalue()


def write(card: dict[str, Any], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in FILES]
    write_run_atomic(paths[0], json.dumps(card, indent=2, sort_keys=True) + "\n")  # never through a planted link
    write_run_atomic(paths[1], csv_text(card))
    plot(card, paths[2])
    return paths


def plot(card: dict[str, Any], path: str | Path) -> Path:
    """Each run's equity against the buy-and-hold, drawdowns below (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import pandas as pd

    from agent.metrics import drawdown_series

    fig = plt.figure(figsize=(15, 6.5))
    grid = fig.add_gridspec(2, 2, height_ratios=[3, 1], width_ratios=[2.2, 1])
    ax = fig.add_subplot(grid[0, 0])
    axdd = fig.add_subplot(grid[1, 0], sharex=ax)
    scatter = fig.add_subplot(grid[:, 1])
    # every published row and each run on return against drawdown (the paper's two headline figures)
    for row in card["rows"]:
        if row.get("cumulative_return") is None or row.get("max_drawdown") is None:
            continue
        kind = row["kind"]
        scatter.scatter(
            [row["max_drawdown"] * 100],
            [row["cumulative_return"] * 100],
            s=30,
            marker={"published": "o", "run": "*", "baseline": "s", "run_mean": "P"}.get(kind, "o"),
            color={"published": "tab:blue", "run": "tab:red", "baseline": "tab:gray", "run_mean": "darkred"}.get(
                kind, "k"
            ),
        )
        scatter.annotate(
            row["name"],
            (row["max_drawdown"] * 100, row["cumulative_return"] * 100),
            fontsize=6,
            xytext=(3, 2),
            textcoords="offset points",
        )
    scatter.set_xlabel("max drawdown %")
    scatter.set_ylabel("cumulative return %")
    scatter.set_title("runs (*), their mean (+), buy & hold (square), published (o)", fontsize=9)
    scatter.grid(alpha=0.3)
    for row in card["rows"]:
        if row["kind"] not in ("run", "baseline") or not row.get("nav"):
            continue
        dates = pd.to_datetime([p["date"] for p in row["nav"]])
        equity = [p["equity"] for p in row["nav"]]
        style = {"color": "tab:gray", "lw": 1.2} if row["kind"] == "baseline" else {"lw": 1.5}
        ax.plot(dates, equity, label=row["name"], **style)
        axdd.plot(dates, [-d * 100 for d in drawdown_series(equity)], **style)
    w = card["window"]
    ax.set_title(f"StockBench {w['start']}..{w['end']} ({w['sessions']} sessions, {len(card['symbols'])} symbols)")
    ax.set_ylabel("equity")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    axdd.set_ylabel("drawdown %")
    axdd.grid(alpha=0.3)
    # a short window gets one tick per session day, never the same date twice (half-day ticks)
    span = (pd.Timestamp(w["end"]) - pd.Timestamp(w["start"])).days
    axdd.xaxis.set_major_locator(mdates.DayLocator() if span <= 14 else mdates.AutoDateLocator(maxticks=10))
    axdd.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    fig.tight_layout()
    out = save_figure(fig, path, dpi=110)
    plt.close(fig)
    return out
