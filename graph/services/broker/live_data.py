"""The bars a `tradegraph live` day decides on, fetched by the loop itself before the day's cycle through the source
`tradegraph data fetch` uses (agent/data/yahoo.py: yfinance), written into the loop's folder under the runs folder
(graph/kernel/runs.py) and refused unless every symbol's last bar is the previous session's; with them each symbol's
latest headlines (agent/data/yahoo_news.py: yfinance's news stream), at their publication times, in the `--news`
format, unless the loop was given its own --news file."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import pandas as pd

SOURCE = "yfinance"
HISTORY_DAYS = 400  # calendar days of bars: the longest look-back a cycle reads is 260 bars (agent/features/bundle.py)
RETRY_S = 60.0  # between two attempts while the source fails or lags

Getter = Callable[[list[str], str, str], tuple[pd.DataFrame, list[str]]]
NewsGetter = Callable[[list[str]], tuple[list[dict[str, Any]], list[str]]]


class NotFresh(Exception):
    """An attempt that gave no bars to decide on: the source failed, or a symbol's bars stop too early."""


@dataclass(frozen=True)
class Fetch:
    symbols: list[str]
    folder: Path  # the loop's own folder: <runs>/live-NAME
    within: timedelta  # retried this long after the first attempt; then the day is skipped
    get: Getter  # agent.data.yahoo.fetch_yfinance; a test's fake source
    news: Optional[NewsGetter] = None  # agent.data.yahoo_news.fetch_yfinance_news; None: the loop's --news file


def yfinance_getter() -> Getter:
    """The `data fetch` source, its extra checked now (exit 2 before the loop starts, not at 09:35)."""
    from agent.data.yahoo import _yfinance, fetch_yfinance

    _yfinance()
    return fetch_yfinance


def yfinance_news_getter() -> NewsGetter:
    from agent.data.yahoo import _yfinance
    from agent.data.yahoo_news import fetch_yfinance_news

    _yfinance()
    return fetch_yfinance_news


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
    news = _news(fetch, day)  # before the bars are written: a failed attempt leaves no file of this day
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
        **({"news": news} if news is not None else {}),
    }


def _news(fetch: Fetch, day: str) -> Optional[dict[str, Any]]:
    """The day's headlines written to news-DAY.jsonl, or None when the loop reads its own --news file. A source
    that fails is NotFresh like the bars: the day's cycle never runs without the news it was to read."""
    if fetch.news is None:
        return None
    from agent.data.market import DataError
    from agent.data.yahoo import FetchFailed
    from agent.data.yahoo_news import write_news

    try:
        rows, notes = fetch.news(fetch.symbols)
    except (FetchFailed, DataError) as e:
        raise NotFresh(str(e)) from None
    fetch.folder.mkdir(parents=True, exist_ok=True)
    path = fetch.folder / f"news-{day}.jsonl"
    try:
        write_news(rows, path)
    except DataError as e:
        raise NotFresh(str(e)) from None
    per = {s: [r["published_at"] for r in rows if r["symbol"] == s.upper()] for s in fetch.symbols}
    return {
        "source": SOURCE,
        "headlines": {s: len(p) for s, p in per.items()},
        "latest": {s: max(p) if p else None for s, p in per.items()},
        "notes": notes,
        "file": str(path),
        "sha256": sha256(path),
    }


def files_of(data: dict[str, Any]) -> dict[str, str]:
    """The files a day's cycle reads instead of the loop's own: its bars, and its headlines when it fetched them."""
    return {"prices": str(data["file"])} | ({"news": str(data["news"]["file"])} if data.get("news") else {})


def intact(data: dict[str, Any]) -> bool:
    """The files a day fetched are still there, unchanged (a restart reads them rather than fetching again)."""
    kept = [data] + ([data["news"]] if isinstance(data.get("news"), dict) else [])
    return all(Path(str(d.get("file"))).is_file() and sha256(Path(str(d.get("file")))) == d.get("sha256") for d in kept)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
