"""Daily OHLCV with point-in-time access.

Everything an agent sees about prices goes through `MarketData.as_of`, which slices with
`searchsorted(side="right")`: a bar dated after the as-of date is unreachable by construction.
Prices are split-adjusted on load (factor Adj Close / Close) so a split never looks like a crash.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Optional, TypeAlias

import numpy as np
import pandas as pd

VENDORED_CSV = Path(__file__).with_name("stocks.csv.gz")
COLUMNS = ("open", "high", "low", "close", "volume")
_PRICE_COLUMNS = ("open", "high", "low", "close")
_ALIASES = {"ticker": "symbol", "adj_close": "adj_close", "adjclose": "adj_close", "adjusted_close": "adj_close"}
_ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

DateLike: TypeAlias = str | date | datetime | pd.Timestamp


class DataError(ValueError):
    """Bad or unusable input data; the message names file, row and column where relevant."""


class UnknownSymbolError(DataError):
    pass


class DateOutOfRangeError(DataError):
    pass


def parse_date(value: DateLike) -> pd.Timestamp:
    """A calendar day as a naive midnight Timestamp; strings must be YYYY-MM-DD."""
    if isinstance(value, pd.Timestamp):
        ts = value
    elif isinstance(value, (datetime, date)):
        ts = pd.Timestamp(value)
    else:
        text = str(value).strip()
        if not _ISO_RE.match(text):
            raise DataError(f"malformed date '{value}' (expected YYYY-MM-DD)")
        try:
            ts = pd.Timestamp(datetime.strptime(text, "%Y-%m-%d"))
        except ValueError:
            raise DataError(f"malformed date '{value}' (expected YYYY-MM-DD)") from None
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return ts.normalize()


class MarketData:
    """Per-symbol split-adjusted daily bars, immutable after construction."""

    def __init__(
        self,
        frames: dict[str, pd.DataFrame],
        source: str = "<memory>",
        label: str = "prices file",
        sha256: Optional[str] = None,
    ) -> None:
        self.source = source
        self.label = label  # what `source` is, in messages: a prices file, a StockBench tree
        self.sha256 = sha256  # the content hash taken when it was read, where the reader took one (a data tree)
        self._frames: dict[str, pd.DataFrame] = {}
        self._dates: dict[str, np.ndarray] = {}  # datetime64[ns] per symbol, for searchsorted
        for symbol, frame in sorted(frames.items()):
            f = frame.loc[:, list(COLUMNS)].astype("float64")
            f.index = pd.DatetimeIndex(f.index, name="date").as_unit("ns")
            if not f.index.is_monotonic_increasing or f.index.has_duplicates:
                raise DataError(f"{source}: dates for {symbol} are not strictly increasing")
            f.flags.allows_duplicate_labels = False
            self._frames[symbol] = f
            self._dates[symbol] = f.index.values

    def __repr__(self) -> str:
        return f"MarketData({self.source!r}, symbols={self.universe()})"

    def universe(self) -> list[str]:
        return list(self._frames)

    def _check(self, symbol: str) -> pd.DataFrame:
        try:
            return self._frames[symbol]
        except KeyError:
            known = ", ".join(self._frames)
            raise UnknownSymbolError(f"unknown symbol '{symbol}' (known: {known}) in {self.where()}") from None

    def where(self) -> str:
        """Which data was searched, as a user would look for it: the file, and whether it is the bundled sample."""
        if self.source == str(VENDORED_CSV):
            return f"the bundled sample prices {self.source} (your own prices: docs/own-data.md)"
        return f"{self.label} {self.source}"

    def rows(self, symbol: str) -> int:
        return len(self._check(symbol))

    def bars(self, symbol: str, start: DateLike | None = None, end: DateLike | None = None) -> pd.DataFrame:
        frame = self._check(symbol)
        dates = self._dates[symbol]
        lo = 0 if start is None else int(dates.searchsorted(parse_date(start).to_datetime64(), side="left"))
        hi = len(dates) if end is None else int(dates.searchsorted(parse_date(end).to_datetime64(), side="right"))
        return frame.iloc[lo:hi].copy()

    def position_as_of(self, symbol: str, as_of: DateLike) -> int:
        """Number of bars dated on/before `as_of` (so the last visible bar is at index n-1)."""
        self._check(symbol)
        return int(self._dates[symbol].searchsorted(parse_date(as_of).to_datetime64(), side="right"))

    def as_of(self, symbol: str, as_of: DateLike, lookback: int | None = None) -> pd.DataFrame:
        frame = self._check(symbol)
        hi = self.position_as_of(symbol, as_of)
        lo = 0 if lookback is None else max(0, hi - int(lookback))
        return frame.iloc[lo:hi].copy()

    def date_range(self, symbol: str) -> tuple[pd.Timestamp, pd.Timestamp]:
        idx = self._check(symbol).index
        return idx[0], idx[-1]

    def trading_dates(
        self, symbol: str, start: DateLike | None = None, end: DateLike | None = None
    ) -> list[pd.Timestamp]:
        return list(self.bars(symbol, start, end).index)


# ---------------------------------------------------------------- loading


def _normalise_columns(df: pd.DataFrame) -> pd.DataFrame:
    names = {}
    for col in df.columns:
        key = re.sub(r"[\s\-]+", "_", str(col).strip().lower())
        names[col] = _ALIASES.get(key, key)
    return df.rename(columns=names)


def _frames_from_table(raw: pd.DataFrame, path: str, first_row: int) -> dict[str, pd.DataFrame]:
    """Validate a long table (symbol, date, OHLCV[, adj_close]) and split-adjust it.

    `first_row` is the row number reported for the first data row (2 for a CSV: line 1 is
    the header; 1 for Parquet), so messages point at the line a user would open.
    """
    df = _normalise_columns(raw)
    required = ("symbol", "date", *COLUMNS)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)} (found: {', '.join(map(str, raw.columns))})")
    cols = [*required, *(["adj_close"] if "adj_close" in df.columns else [])]
    df = df.loc[:, cols].reset_index(drop=True)
    rows = np.arange(len(df)) + first_row

    def fail(i: int, col: str, what: str) -> None:
        raise DataError(f"{path}: row {rows[i]}, column '{col}': {what}")

    for col in cols:
        na = df[col].isna().to_numpy()
        if na.any():
            fail(int(na.argmax()), col, "missing value (NaN)")
    df["symbol"] = df["symbol"].astype(str).str.strip().str.upper()
    dates = pd.to_datetime(df["date"].astype(str).str.strip(), errors="coerce", format="mixed")
    bad = dates.isna().to_numpy()
    if bad.any():
        i = int(bad.argmax())
        fail(i, "date", f"unparseable date '{df['date'].iloc[i]}'")
    if getattr(dates.dt, "tz", None) is not None:
        dates = dates.dt.tz_convert("UTC").dt.tz_localize(None)
    df["date"] = dates.dt.normalize()
    for col in cols[2:]:
        num = pd.to_numeric(df[col], errors="coerce")
        bad = num.isna().to_numpy()
        if bad.any():
            i = int(bad.argmax())
            fail(i, col, f"not a number: {df[col].iloc[i]!r}")
        df[col] = num.astype("float64")
    check_bar_values(df, fail)
    frames: dict[str, pd.DataFrame] = {}
    for symbol, group in df.groupby("symbol", sort=True):
        d = group["date"].to_numpy()
        step = np.diff(d).astype("int64")
        if (step == 0).any():
            i = int(group.index[int((step == 0).argmax()) + 1])
            fail(i, "date", f"duplicate date {df['date'].iloc[i].date()} for {symbol}")
        if (step < 0).any():
            i = int(group.index[int((step < 0).argmax()) + 1])
            fail(
                i,
                "date",
                f"date {df['date'].iloc[i].date()} for {symbol} is before the previous row (dates must be ascending)",
            )
        frame = group.set_index("date")[list(cols[2:])]
        if "adj_close" in frame.columns:
            factor = frame.pop("adj_close") / frame["close"]
            frame[list(_PRICE_COLUMNS)] = frame[list(_PRICE_COLUMNS)].mul(factor, axis=0)
            frame["volume"] = frame["volume"] / factor
        frames[str(symbol)] = frame
    if not frames:
        raise DataError(f"{path}: no data rows")
    return frames


def check_bar_values(df: pd.DataFrame, fail: Callable[[int, str, str], None]) -> None:
    """Every number of every bar finite, prices positive, volume non-negative, and each bar whole: its high at or
    above its open and close, its low at or below them. `fail(row position, column, what)` raises; the first
    violation is reported, column by column."""
    for col in [c for c in (*COLUMNS, "adj_close") if c in df.columns]:
        values = df[col].to_numpy(dtype="float64")
        bad = ~np.isfinite(values)
        if bad.any():
            fail(int(bad.argmax()), col, f"not a finite number ({values[bad.argmax()]})")
        bad = values < 0 if col == "volume" else ~(values > 0)
        if bad.any():
            fail(
                int(bad.argmax()),
                col,
                f"{'negative volume' if col == 'volume' else 'non-positive price'} {values[bad.argmax()]}",
            )
    o, h, low, c = (df[k].to_numpy(dtype="float64") for k in _PRICE_COLUMNS)
    top, bottom = np.maximum(o, c), np.minimum(o, c)
    bad = h < top
    if bad.any():
        i = int(bad.argmax())
        fail(i, "high", f"high {h[i]} is below the bar's open or close ({top[i]})")
    bad = low > bottom
    if bad.any():
        i = int(bad.argmax())
        fail(i, "low", f"low {low[i]} is above the bar's open or close ({bottom[i]})")


def load_market_data(path: str | Path) -> MarketData:
    """Load a user's CSV (optionally gzipped) or Parquet file of daily bars."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            raw, first_row = pd.read_parquet(p), 1
        else:
            raw, first_row = pd.read_csv(p, dtype={"date": str, "Date": str}), 2
    except DataError:
        raise
    except Exception as exc:  # parser errors carry their own line numbers
        raise DataError(f"{p}: cannot read file: {exc}") from exc
    return MarketData(_frames_from_table(raw, str(p), first_row), source=str(p))


@functools.lru_cache(maxsize=1)
def default_market_data() -> MarketData:
    """The vendored real data set (see agent/data/README.md), split-adjusted."""
    return load_market_data(VENDORED_CSV)


class NotATradingDayError(DataError):
    """The market is closed that day, or the data has no bar for it: deciding would use a stale price."""


def validate_as_of(market: MarketData, symbols: list[str], as_of: str, profile=None) -> pd.Timestamp:
    """Check a run's inputs up front so a bad flag fails before any agent runs.

    With a market `profile` (name or MarketProfile) the date must also be a session of that market's
    calendar and every symbol must have a bar on it: otherwise the cycle would decide, and fill, on
    the previous day's close stamped with this date.
    """
    for symbol in symbols:
        market._check(symbol)
    ts = parse_date(as_of)
    for symbol in symbols:
        first, last = market.date_range(symbol)
        if ts < first or ts > last:
            raise DateOutOfRangeError(
                f"as-of date {ts.date()} is outside the data for {symbol} ({first.date()}..{last.date()})"
            )
    if profile is not None:
        check_trading_day(market, symbols, ts, profile)
    return ts


def check_trading_day(market: MarketData, symbols: list[str], day: pd.Timestamp, profile) -> None:
    from agent.markets import CalendarRangeError, get_profile, is_trading_day, nearest_trading_days

    p = get_profile(profile)
    try:
        open_ = is_trading_day(p, day)
    except CalendarRangeError as e:
        raise NotATradingDayError(f"as-of date {day.date()}: {e}") from None
    if not open_:
        before, after = nearest_trading_days(p, day)
        raise NotATradingDayError(
            f"as-of date {day.date()} ({day.day_name()}) is not a trading day for {p.name}: "
            f"nearest trading days {_d(before)} before, {_d(after)} after"
        )
    for symbol in symbols:
        i = market.position_as_of(symbol, day)
        dates = market._dates[symbol]
        if i == 0 or dates[i - 1] != day.to_datetime64():
            after = pd.Timestamp(dates[i]) if i < len(dates) else None
            before = pd.Timestamp(dates[i - 1]) if i > 0 else None
            raise NotATradingDayError(
                f"no {symbol} bar on {day.date()}, a trading day for {p.name}: "
                f"nearest bars {_d(before)} before, {_d(after)} after"
            )


def _d(ts: pd.Timestamp | None) -> str:
    return "none" if ts is None else str(ts.date())
