"""A sweep's table never shows a ratio from a window too short to mean anything without a word: the Sharpe is
starred and a warning names the configuration and its fewest decision points (the backtest's own threshold,
graph/services/backtest/loop.py SHORT_WINDOW_POINTS). The rule's own cases; tests/integration/test_sweep.py checks
the table a real sweep prints."""

from __future__ import annotations

from graph.services.backtest.loop import SHORT_WINDOW_POINTS
from graph.transports.cli.sweep import short_window_warning, shortest_windows


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
