"""A sweep's table never shows a ratio from a window too short to mean anything without a word: the Sharpe is
starred and a warning names the configuration and its fewest decision points (the backtest's own threshold,
graph/services/backtest/loop.py SHORT_WINDOW_POINTS)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from graph.services.backtest.loop import SHORT_WINDOW_POINTS
from graph.transports.cli.sweep import short_window_warning, shortest_windows

REPO = Path(__file__).resolve().parents[2]


def _row(config: str, points: int, status: str = "succeeded") -> dict:
    return {"config_key": config, "decision_points": points, "status": status}


def test_the_warning_starts_below_the_backtests_threshold_and_counts_only_completed_windows():
    rows = [
        _row("a", SHORT_WINDOW_POINTS),
        _row("a", SHORT_WINDOW_POINTS + 40),
        _row("b", 3, "failed"),
        _row("b", SHORT_WINDOW_POINTS + 1),
    ]
    assert shortest_windows(rows) == {"a": SHORT_WINDOW_POINTS, "b": SHORT_WINDOW_POINTS + 1}
    assert short_window_warning(shortest_windows(rows)) is None
    rows.append(_row("b", SHORT_WINDOW_POINTS - 1))
    warning = short_window_warning(shortest_windows(rows))
    assert warning is not None and f"b ({SHORT_WINDOW_POINTS - 1})" in warning and "a (" not in warning


@pytest.mark.integration
@pytest.mark.requires("ray")
def test_a_sweep_over_a_short_window_stars_its_sharpe_and_says_why(embedded_uri, tmp_path):
    db = f"{embedded_uri}/sweep_short_{uuid.uuid4().hex[:8]}"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "graph.transports.cli",
            "sweep",
            "--symbols",
            "AAPL,MSFT",
            "--windows",
            "2012-03-01..2012-03-30",
            "--every",
            "5",
            "--workers",
            "1",
            "--no-progress",
            "--db",
            db,
            "--out",
            str(tmp_path / "exp"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "TRADEGRAPH_LLM": "offline", "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "1/1" in line)  # the configuration's row
    sharpe = row.split("│")[4].strip()
    assert sharpe.endswith("*") and sharpe != "—*", row
    assert f"short windows: 1 configuration(s) completed a window of fewer than {SHORT_WINDOW_POINTS}" in r.stdout
    assert "(5)" in r.stdout  # 2012-03-01..2012-03-30 every 5 sessions: five decision points
