"""The bars a `tradegraph live` day decides on, fetched by the loop itself before the day's cycle through the source
`tradegraph data fetch` uses (agent/data/yahoo.py: yfinance), written into the loop's folder under the runs folder
(graph/kernel/runs.py) and refused unless every symbol's last bar is the previous session's. News is not fetched:
`data fetch` has no news source."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd

SOURCE = "yfinance"
HISTORY_DAYS = 400  # calendar days of bars: the longest look-back a cycle reads is 260 bars (agent/features/bundle.py)
RETRY_S = 60.0  # between two attempts while the source fails or lags

Getter = Callable[[list[str], str, str], tuple[pd.DataFrame, list[str]]]


class NotFresh(Exception):
    """An attempt that gave no bars to decide on: the source failed, or a symbol's bars stop too early."""


@dataclass(frozen=True)
class Fetch:
    symbols: list[str]
    folder: Path  # the loop's own folder: <runs>/live-NAME
    within: timedelta  # retried this long after the first attempt; then the day is skipped
    get: Getter  # agent.data.yahoo.fetch_yfinance; a test's fake source


def yfinance_getter() -> Getter:
    """The `data fetch` source, its extra checked now (exit 2 before the loop starts, not at 09:35)."""
    from agent.data.yahoo import _yfinance, fetch_yfinance

    _yfinance()
    return fetch_yfinance


def fetch_once(fetch: Fetch, day: str, as_of: str) -> dict[str, Any]:
    """One attempt: the day's price file written (atomically, and read back by the loader every run uses) and what
    it holds; NotFresh, one line, when the source fails or a symbol's last bar is not `as_of`."""
    from agent.data.market import DataError
    from agent.data.yahoo import FetchFailed, write_prices

    start = str((pd.Timestamp(as_of) - pd.Timedelta(days=HISTORY_DAYS)).date())
    try:
        frame, notes = fetch.get(fetch.symbols, start, as_of)  # through as_of: today's bar, unfinished, stays out
    except (FetchFailed, DataError) as e:
        raise NotFresh(str(e)) from None
    last = frame.groupby("symbol")["date"].max().to_dict()
    for symbol in fetch.symbols:
        if last.get(symbol) != as_of:
            raise NotFresh(
                f"{SOURCE}: {symbol}: last bar {last.get(symbol, 'none')}, not the previous session {as_of}: refused"
            )
    fetch.folder.mkdir(parents=True, exist_ok=True)
    path = fetch.folder / f"bars-{day}.parquet"
    try:
        write_prices(frame, path)
    except DataError as e:
        raise NotFresh(str(e)) from None
    return {
        "source": SOURCE,
        "symbols": list(fetch.symbols),
        "start": start,
        "through": as_of,
        "last_bar": {s: last[s] for s in fetch.symbols},
        "rows": len(frame),
        "notes": notes,
        "file": str(path),
        "sha256": sha256(path),
    }


def intact(data: dict[str, Any]) -> bool:
    """The file a day fetched is still there, unchanged (a restart reads it rather than fetching again)."""
    p = Path(str(data.get("file")))
    return p.is_file() and sha256(p) == data.get("sha256")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
