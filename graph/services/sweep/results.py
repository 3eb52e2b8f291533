"""A sweep's results under experiments/{sweep_id}/:

- grid.json: the grid as given, and every episode it expanded into (what a resume must match);
- results.jsonl and results.csv: one row of metrics per episode (its latest attempt; while the sweep runs,
  results.jsonl grows a line per landed episode, compacted when it stops);
- aggregate.json and aggregate.csv: per configuration, across its windows: mean, median and spread of the
  return, Sharpe and drawdown, the failed episodes and cycles, and buy-and-hold side by side;
- sweep.png: each episode's return against its drawdown, one colour per configuration, the configuration's
  median marked (X) beside its own universe's buy-and-hold median (open diamond);
- episodes/{episode_id}/: each episode's backtest files, as `tradegraph backtest` writes them.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

from graph.services.run_files import open_run_file, read_run_text, run_file_exists, save_figure, write_run_atomic
from graph.services.sweep.grid import Episode

SWEEP_FILES = (
    ("grid.json", "application/json"),
    ("results.jsonl", "application/jsonl"),
    ("results.csv", "text/csv"),
    ("aggregate.json", "application/json"),
    ("aggregate.csv", "text/csv"),
    ("sweep.png", "image/png"),
)
ROW_METRICS = ("total_return", "annualised_return", "sharpe", "max_drawdown", "num_trades", "hit_rate")
SUMMARY_METRICS = ("total_return", "sharpe", "max_drawdown")


def episode_row(
    ep: Episode, result: Any, *, status: str, error: Optional[str], seconds: float, attempts: int, session_id: str
) -> dict[str, Any]:
    m = dict(result.metrics) if result is not None else {}
    b = dict(result.benchmark_metrics) if result is not None else {}
    actions = dict(result.actions) if result is not None else {}
    cost = dict(result.llm_cost or {}) if result is not None else {}
    row = {
        "episode_id": ep.episode_id,
        "config_key": ep.config_key,
        "window": ep.window.label,
        "start": ep.window.start,
        "end": ep.window.end,
        "symbols": ",".join(ep.symbols),
        "memory": ep.memory,
        "model": ep.quick_model or "configured",
        "override": ep.override_label,
        "status": status,
        "error": error,
        "decision_points": result.decision_points if result is not None else 0,
        "failed_cycles": int(actions.get("failed", 0)),
        "trades": int(actions.get("trade", 0)),
        **{k: m.get(k) for k in ROW_METRICS},
        "benchmark_total_return": b.get("total_return"),
        "benchmark_max_drawdown": b.get("max_drawdown"),
        "excess_return": (m["total_return"] - b["total_return"])
        if m.get("total_return") is not None and b.get("total_return") is not None
        else None,
        "llm_calls": cost.get("calls", 0),
        "llm_tokens": cost.get("total_tokens", 0),
        "llm_usd": cost.get("usd"),
        "seconds": round(seconds, 3),
        "attempts": attempts,
        "session_id": session_id,
    }
    return row


def _write_atomic(path: Path, text: str) -> None:
    write_run_atomic(path, text)  # never through a link planted in the sweep folder (graph/services/run_files.py)


def _csv(path: Path, rows: list[dict[str, Any]]) -> None:
    out = io.StringIO(newline="")
    if rows:
        w = csv.DictWriter(out, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_run_atomic(path, out.getvalue())


class GridChanged(ValueError):
    """An existing sweep id given another grid."""


def write_grid(sweep_dir: Path, given: dict[str, Any], episodes: list[Episode], digest: str) -> None:
    """grid.json; an existing sweep resumes only with the grid it started on (same episodes, same ids)."""
    path = sweep_dir / "grid.json"
    if run_file_exists(path):
        before = json.loads(read_run_text(path)).get("grid_hash")
        if before != digest:
            raise GridChanged(
                f"sweep '{sweep_dir.name}' exists with another grid ({path}): resume it with the same "
                f"grid, or give a new sweep id"
            )
        return
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(
        path,
        json.dumps(
            {
                "sweep_id": sweep_dir.name,
                "grid": given,
                "grid_hash": digest,
                "episodes": [e.as_dict() for e in episodes],
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
    )


def load_rows(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    path = sweep_dir / "results.jsonl"
    if not run_file_exists(path):
        return {}
    rows = {}
    for line in read_run_text(path).splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["episode_id"]] = row
    return rows


def append_row(sweep_dir: Path, row: dict[str, Any]) -> None:
    """One landed episode, appended (a later line for the same episode supersedes it; load_rows keeps the last),
    so a sweep of thousands of episodes does not rewrite every row each time one lands."""
    with open_run_file(sweep_dir / "results.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def write_rows(sweep_dir: Path, rows: dict[str, dict[str, Any]], order: Iterable[str]) -> None:
    """results.jsonl compacted to one row per episode in grid order, and results.csv (when a sweep stops)."""
    ordered = [rows[i] for i in order if i in rows]
    _write_atomic(sweep_dir / "results.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in ordered))
    _csv(sweep_dir / "results.csv", ordered)


def _spread(values: list[float]) -> dict[str, Optional[float]]:
    if not values:
        return {"mean": None, "median": None, "stdev": None, "min": None, "max": None}
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per configuration, across its windows. Only completed episodes enter the statistics; the
    others are counted, so a configuration that failed half its windows can't look like a clean one."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["config_key"], []).append(r)
    out = []
    for key, group in by.items():
        done = [r for r in group if r["status"] == "succeeded"]
        entry = {
            "config_key": key,
            "episodes": len(group),
            "succeeded": len(done),
            "failed_episodes": sum(r["status"] == "failed" for r in group),
            "unfinished_episodes": sum(r["status"] not in ("succeeded", "failed") for r in group),
            "failed_cycles": sum(int(r["failed_cycles"] or 0) for r in group),
            "decision_points": sum(int(r["decision_points"] or 0) for r in group),
        }
        for metric in SUMMARY_METRICS + ("benchmark_total_return", "excess_return"):
            entry[metric] = _spread([r[metric] for r in done if r.get(metric) is not None])
        entry["beat_benchmark"] = sum(1 for r in done if (r.get("excess_return") or 0) > 0)
        entry["llm_usd"] = (
            sum(r["llm_usd"] or 0.0 for r in group) if any(r["llm_usd"] is not None for r in group) else None
        )
        out.append(entry)
    return out


def flat(entry: dict[str, Any]) -> dict[str, Any]:
    """One CSV row: a metric's spread becomes total_return_mean, total_return_median, ..."""
    out: dict[str, Any] = {}
    for k, v in entry.items():
        if isinstance(v, dict):
            out.update({f"{k}_{stat}": x for stat, x in v.items()})
        else:
            out[k] = v
    return out


def write_aggregate(sweep_dir: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    agg = aggregate(rows)
    _write_atomic(sweep_dir / "aggregate.json", json.dumps(agg, indent=2, sort_keys=True) + "\n")
    _csv(sweep_dir / "aggregate.csv", [flat(a) for a in agg])
    return agg


def plot(sweep_dir: Path, rows: list[dict[str, Any]]) -> Optional[Path]:
    """Return against max drawdown per episode, one colour per configuration; None with nothing completed."""
    done = [r for r in rows if r["status"] == "succeeded" and r.get("total_return") is not None]
    if not done:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    keys = list(dict.fromkeys(r["config_key"] for r in done))
    cmap = plt.get_cmap("tab10")
    for i, key in enumerate(keys):
        group = [r for r in done if r["config_key"] == key]
        xs, ys = [100 * r["max_drawdown"] for r in group], [100 * r["total_return"] for r in group]
        ax.scatter(xs, ys, color=cmap(i % 10), alpha=0.6, s=28, label=f"{key} ({len(group)})")
        ax.scatter(
            [statistics.median(xs)],
            [statistics.median(ys)],
            color=cmap(i % 10),
            marker="X",
            s=140,
            edgecolor="black",
            linewidth=0.8,
        )
        # the configuration's own benchmark (its universe held over the same windows): an open diamond
        bench = [
            (100 * r["benchmark_max_drawdown"], 100 * r["benchmark_total_return"])
            for r in group
            if r.get("benchmark_total_return") is not None and r.get("benchmark_max_drawdown") is not None
        ]
        if bench:
            ax.scatter(
                [statistics.median(b[0] for b in bench)],
                [statistics.median(b[1] for b in bench)],
                facecolors="none",
                edgecolors=cmap(i % 10),
                marker="D",
                s=110,
                linewidth=1.6,
            )
    ax.scatter([], [], facecolors="none", edgecolors="grey", marker="D", label="its buy and hold, median")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel("max drawdown (%)")
    ax.set_ylabel("total return (%)")
    ax.set_title(f"{sweep_dir.name}: each window's episode, X = the configuration's median")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = save_figure(fig, sweep_dir / "sweep.png")
    plt.close(fig)
    return out
