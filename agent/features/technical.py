"""Technical indicators, computed once per symbol over its whole history.

Every column is causal (row t uses bars <= t only), so slicing the whole-history frame at t
equals recomputing on bars up to t; that lets one frame serve every decision date. Indicator
math comes from the `ta` package; only simple rolling statistics are written here.

Definitions (documented because agents cite them):
- swing_high / swing_low: max high / min low of the last 20 bars, today included.
- support / resistance: min low / max high of the 60 bars *before* today. Excluding today
  lets a close below support (negative dist_to_support_pct) show a breakdown.
- dist_to_support_pct = (close - support) / close * 100 (positive: above support).
- dist_to_resistance_pct = (resistance - close) / close * 100 (positive: below resistance).
- gap_pct = (open - prev close) / prev close * 100.
- volume_vs_avg20 = volume / mean volume of the 20 bars before today.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
import pandas as pd
from ta.momentum import RSIIndicator
from ta.trend import MACD, EMAIndicator, SMAIndicator
from ta.volatility import BollingerBands

from agent.data.market import DateLike, MarketData, default_market_data, parse_date

SWING_WINDOW = 20
LEVEL_WINDOW = 60
ATR_WINDOW = 14

INDICATOR_COLUMNS = (
    "close", "prev_close", "volume", "rsi14", "macd", "macd_signal", "macd_hist", "sma20", "sma50",
    "sma200", "ema20", "atr14", "bb_upper", "bb_middle", "bb_lower", "swing_high", "swing_low",
    "support", "resistance", "dist_to_support_pct", "dist_to_resistance_pct", "gap_pct",
    "volume_vs_avg20",
)
# computable from a close series alone (the fallback bundle uses these)
CLOSE_ONLY_COLUMNS = (
    "close", "prev_close", "rsi14", "macd", "macd_signal", "macd_hist", "sma20", "sma50", "sma200",
    "ema20", "bb_upper", "bb_middle", "bb_lower",
)


def close_indicators(close: pd.Series) -> dict[str, pd.Series]:
    """Indicators that need closes only. Warm-up rows are NaN (fillna=False everywhere)."""
    macd = MACD(close, window_slow=26, window_fast=12, window_sign=9, fillna=False)
    bb = BollingerBands(close, window=20, window_dev=2, fillna=False)  # population std, like TA-Lib
    return {
        "close": close,
        "prev_close": close.shift(1),
        "rsi14": RSIIndicator(close, window=14, fillna=False).rsi(),
        "macd": macd.macd(),
        "macd_signal": macd.macd_signal(),
        "macd_hist": macd.macd_diff(),
        "sma20": SMAIndicator(close, window=20, fillna=False).sma_indicator(),
        "sma50": SMAIndicator(close, window=50, fillna=False).sma_indicator(),
        "sma200": SMAIndicator(close, window=200, fillna=False).sma_indicator(),
        "ema20": EMAIndicator(close, window=20, fillna=False).ema_indicator(),
        "bb_upper": bb.bollinger_hband(),
        "bb_middle": bb.bollinger_mavg(),
        "bb_lower": bb.bollinger_lband(),
    }


def wilder_atr(high: pd.Series, low: pd.Series, close: pd.Series, window: int = ATR_WINDOW) -> pd.Series:
    """`ta.volatility.AverageTrueRange` without its Python loop (70% of a full-history frame's time, by
    cProfile): the seed is the mean true range of the first `window` bars, then Wilder's smoothing
    atr[i] = (atr[i-1]·(n-1) + tr[i]) / n, which is an exponential mean with alpha 1/n started at the seed.
    Pinned to ta within 1e-9 on every bundled symbol (tests/unit/test_features.py). Warm-up rows are NaN."""
    prev_close = close.shift(1)
    # the first bar has no previous close: its true range is high - low (ta's row-wise max skips the NaN)
    true_range = np.fmax(high - low, np.fmax((high - prev_close).abs(), (low - prev_close).abs()))
    out = pd.Series(np.nan, index=close.index, dtype="float64")
    if len(close) < window:
        return out
    tr = true_range.to_numpy()
    seeded = np.concatenate(([tr[:window].mean()], tr[window:]))
    smoothed = pd.Series(seeded).ewm(alpha=1.0 / window, adjust=False).mean().to_numpy()
    out.iloc[window - 1:] = smoothed
    return out


def compute_indicator_frame(bars: pd.DataFrame) -> pd.DataFrame:
    """All indicator columns for `bars` (ascending daily OHLCV), same index."""
    high, low, close, open_, volume = (bars[c].astype("float64") for c in ("high", "low", "close", "open", "volume"))
    cols = close_indicators(close)
    cols["volume"] = volume

    atr = wilder_atr(high, low, close, ATR_WINDOW)
    # a zero ATR would read as "no volatility" (ta's warm-up is 0.0 too), so it is masked like the warm-up
    atr = atr.where(atr > 0)
    atr.iloc[:ATR_WINDOW] = np.nan
    cols["atr14"] = atr

    cols["swing_high"] = high.rolling(SWING_WINDOW, min_periods=SWING_WINDOW).max()
    cols["swing_low"] = low.rolling(SWING_WINDOW, min_periods=SWING_WINDOW).min()
    support = low.rolling(LEVEL_WINDOW, min_periods=LEVEL_WINDOW).min().shift(1)
    resistance = high.rolling(LEVEL_WINDOW, min_periods=LEVEL_WINDOW).max().shift(1)
    cols["support"], cols["resistance"] = support, resistance
    cols["dist_to_support_pct"] = (close - support) / close * 100.0
    cols["dist_to_resistance_pct"] = (resistance - close) / close * 100.0

    prev_close = cols["prev_close"]
    cols["gap_pct"] = (open_ - prev_close) / prev_close * 100.0
    avg20 = volume.rolling(20, min_periods=20).mean().shift(1)
    cols["volume_vs_avg20"] = (volume / avg20).where(avg20 > 0)

    frame = pd.DataFrame(cols, index=bars.index)
    return frame.loc[:, list(INDICATOR_COLUMNS)]


class _Entry:
    """One symbol's frame plus raw numpy columns, so the hot path skips pandas indexing."""

    __slots__ = ("frame", "dates", "arrays", "matrix", "ohlcv", "date_strs")

    def __init__(self, frame: pd.DataFrame, bars: pd.DataFrame | None = None) -> None:
        self.frame = frame
        self.dates = frame.index.values
        # raw bars kept beside the indicators so a bundle's price history needs no pandas
        self.ohlcv = None if bars is None else bars.loc[:, ["open", "high", "low", "close", "volume"]].to_numpy("float64")
        self.date_strs = frame.index.strftime("%Y-%m-%d").tolist()
        self.matrix = frame.to_numpy(dtype="float64", copy=True)
        self.matrix.flags.writeable = False
        self.arrays = {c: self.matrix[:, i] for i, c in enumerate(frame.columns)}


class IndicatorCache:
    """Per (MarketData, symbol) indicator frames, computed once, shared across threads.

    Keys hold the MarketData weakly: a discarded data set frees its frames, and a new object
    (e.g. a mutated copy in a test) can never be served another object's frames. Methods take
    an optional `market`; without one they use the cache's own (default: the vendored data).
    """

    def __init__(self, market: MarketData | None = None) -> None:
        self._market = market
        self._lock = threading.Lock()
        self._store: weakref.WeakKeyDictionary[MarketData, dict[str, _Entry]] = weakref.WeakKeyDictionary()

    def _resolve(self, market: MarketData | None) -> MarketData:
        if market is not None:
            return market
        if self._market is None:
            self._market = default_market_data()
        return self._market

    def entry(self, symbol: str, market: MarketData | None = None) -> _Entry:
        m = self._resolve(market)
        with self._lock:  # held during compute too: parallel analysts must not compute twice
            per_market = self._store.setdefault(m, {})
            entry = per_market.get(symbol)
            if entry is None:
                bars = m.bars(symbol)
                entry = _Entry(compute_indicator_frame(bars), bars)
                per_market[symbol] = entry
            return entry

    def frame(self, symbol: str, market: MarketData | None = None) -> pd.DataFrame:
        return self.entry(symbol, market).frame

    def position(self, symbol: str, as_of: DateLike, market: MarketData | None = None) -> int:
        """Index of the last bar on/before as_of, or -1 if there is none."""
        e = self.entry(symbol, market)
        return int(e.dates.searchsorted(parse_date(as_of).to_datetime64(), side="right")) - 1

    def values_as_of(
        self, symbol: str, as_of: DateLike, market: MarketData | None = None
    ) -> tuple[dict[str, float], int]:
        """(column -> float at the as-of bar, bars available). Fast path for bundle assembly."""
        e = self.entry(symbol, market)
        i = int(e.dates.searchsorted(parse_date(as_of).to_datetime64(), side="right")) - 1
        if i < 0:
            return {}, 0
        return dict(zip(e.frame.columns, e.matrix[i].tolist())), i + 1

    def row_as_of(self, symbol: str, as_of: DateLike, market: MarketData | None = None) -> pd.Series:
        """The indicator row of the last bar on/before as_of (empty Series if none)."""
        e = self.entry(symbol, market)
        i = self.position(symbol, as_of, market)
        if i < 0:
            return pd.Series(dtype="float64")
        return e.frame.iloc[i]

    def clear(self) -> None:
        with self._lock:
            self._store.clear()
