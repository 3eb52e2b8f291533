"""Daily bars from Yahoo Finance through yfinance (the optional `data` extra), written as a price file in the
documented format (agent/data/README.md).

The only module here that reaches the network, and only when a user runs `tradegraph data fetch`: no cycle,
backtest or replay ever does. Open, high, low and close are Yahoo's as quoted (split-adjusted by Yahoo, not
dividend-adjusted); `adj_close` is Yahoo's adjusted close, so loading the file adjusts every bar with
adj_close / close exactly as the bundled data is adjusted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from agent.data.market import DataError, MarketData, load_market_data, parse_date

EXTRA = "data"
COLUMNS = ["symbol", "date", "open", "high", "low", "close", "volume", "adj_close"]
WRITABLE = (".parquet", ".pq", ".csv", ".gz")
_PRICES = ["open", "high", "low", "close", "adj_close"]


class MissingExtra(DataError):
    """yfinance is not installed: the message names the extra that installs it."""


class NoBars(DataError):
    """Yahoo has no daily bar for a symbol in the range: an unknown or delisted symbol, or no session in it."""


class FetchFailed(Exception):
    """The fetch itself failed (network, rate limit, an answer yfinance could not read): not the user's input."""


def _yfinance():
    try:
        import yfinance
    except ImportError:
        raise MissingExtra(f"--source yfinance needs the '{EXTRA}' extra: pip install 'tradegraph[{EXTRA}]'") from None
    return yfinance


@contextlib.contextmanager
def _quietly_raising(yf) -> Iterator[None]:
    """yfinance logs a failed symbol and returns an empty frame unless told otherwise, and logs or warns about
    what it worked around: we want its exception, once, as our one line, and nothing else on the terminal."""
    before = yf.config.debug.hide_exceptions
    logger, mute = logging.getLogger("yfinance"), logging.NullHandler()
    yf.config.debug.hide_exceptions = False
    logger.addHandler(mute)  # a handler of its own: Python's last-resort stderr handler stays out
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"yfinance(\.|$)")
            yield
    finally:
        logger.removeHandler(mute)
        yf.config.debug.hide_exceptions = before


def fetch_yfinance(symbols: list[str], start: str, end: str) -> tuple[pd.DataFrame, list[str]]:
    """Daily bars of `symbols` from `start` to `end` (both inclusive), in the price-file columns, and one note per
    symbol whose incomplete bars were left out."""
    yf = _yfinance()
    from yfinance.exceptions import YFPricesMissingError, YFTzMissingError

    first, last = parse_date(start), parse_date(end)
    frames, notes = [], []
    with _quietly_raising(yf):
        for symbol in symbols:
            where = f"{symbol} in {first.date()}..{last.date()}"
            try:  # Yahoo's end is exclusive
                hist = yf.Ticker(symbol).history(
                    start=str(first.date()),
                    end=str((last + pd.Timedelta(days=1)).date()),
                    interval="1d",
                    auto_adjust=False,
                    actions=False,
                    repair=False,
                )
            except (YFPricesMissingError, YFTzMissingError) as e:
                raise NoBars(f"yfinance: no daily bars for {where}: {_line(e)}") from None
            except Exception as e:  # noqa: BLE001 - whatever the network or Yahoo did, one line naming the symbol
                if getattr(getattr(e, "response", None), "status_code", None) == 404:
                    raise NoBars(
                        f"yfinance: no daily bars for {where}: Yahoo does not know the symbol (HTTP 404)"
                    ) from None
                raise FetchFailed(f"yfinance: fetching {symbol} failed: {type(e).__name__}: {_line(e)}") from None
            if hist.empty:
                raise NoBars(f"yfinance: no daily bars for {symbol} in {first.date()}..{last.date()}")
            frame, dropped = _as_price_rows(symbol, hist)
            if dropped:
                notes.append(
                    f"{symbol}: left out {len(dropped)} incomplete bar(s) (a missing, non-positive or "
                    f"infinite price, or a high or low not containing the open and close), first {dropped[0]}"
                )
            frames.append(frame)
    return pd.concat(frames, ignore_index=True), notes


def _as_price_rows(symbol: str, hist: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    # the exchange's own calendar day: a daily bar's timestamp is its session's local midnight
    frame = pd.DataFrame(
        {
            "symbol": symbol.upper(),
            "date": hist.index.strftime("%Y-%m-%d"),
            "open": hist["Open"].to_numpy("float64"),
            "high": hist["High"].to_numpy("float64"),
            "low": hist["Low"].to_numpy("float64"),
            "close": hist["Close"].to_numpy("float64"),
            "volume": hist["Volume"].fillna(0).to_numpy("float64"),
            "adj_close": hist["Adj Close"].to_numpy("float64"),
        },
        columns=COLUMNS,
    )
    prices = frame[_PRICES].to_numpy()
    o, h, low, c, v = (frame[k].to_numpy() for k in ("open", "high", "low", "close", "volume"))
    # NaN compares False too; a bar whose high or low does not contain its open and close is not one bar
    bad = (
        ~((prices > 0) & np.isfinite(prices)).all(axis=1)
        | ~np.isfinite(v)
        | (v < 0)
        | (h < np.maximum(o, c))
        | (low > np.minimum(o, c))
    )
    return frame[~bad].reset_index(drop=True), frame.loc[bad, "date"].tolist()


def write_prices(frame: pd.DataFrame, out: str | Path) -> MarketData:
    """Write atomically (a failed write leaves no half file) and load the file back with the loader every run
    uses, so what was written is known to be a valid price file."""
    p = Path(out)
    if not p.name.lower().endswith(WRITABLE):
        raise DataError(f"{p}: unsupported file type (use .parquet, .pq, .csv or .csv.gz)")
    tmp = p.with_name(f".part-{p.name}")  # the same extension: the loader picks its reader by it
    try:
        if p.name.lower().endswith((".parquet", ".pq")):
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False, compression="gzip" if p.name.lower().endswith(".gz") else None)
    except OSError as e:
        raise DataError(f"{p}: cannot write: {e.strerror or e}") from None
    try:
        market = load_market_data(tmp)
    except DataError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, p)
    market.source = str(p)
    return market


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
