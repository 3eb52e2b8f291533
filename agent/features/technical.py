"""Technical indicators, computed once per symbol over its whole history.

Every column is causal (row t uses bars <= t only), so slicing the whole-history frame at t
equals recomputing on bars up to t; that lets one frame serve every decision date. Indicator
math is the `ta` package's, computed on numpy arrays (equal to `ta` within 1e-9, tested).

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

from agent.data.market import DateLike, MarketData, default_market_data, parse_date

SWING_WINDOW = 20
LEVEL_WINDOW = 60
ATR_WINDOW = 14

INDICATOR_COLUMNS = (
    "close",
    "prev_close",
    "volume",
    "rsi14",
    "macd",
    "macd_signal",
    "macd_hist",
    "sma20",
    "sma50",
    "sma200",
    "ema20",
    "atr14",
    "bb_upper",
    "bb_middle",
    "bb_lower",
    "swing_high",
    "swing_low",
    "support",
    "resistance",
    "dist_to_support_pct",
    "dist_to_resistance_pct",
    "gap_pct",
    "volume_vs_avg20",
)
_COLUMNS_INDEX = pd.Index(INDICATOR_COLUMNS)
# computable from a close series alone (the fallback bundle uses these)
CLOSE_ONLY_COLUMNS = (
    "close",
    "prev_close",
    "rsi14",
    "macd",
    "macd_signal",
    "macd_hist",
    "sma20",
    "sma50",
    "sma200",
    "ema20",
    "bb_upper",
    "bb_middle",
    "bb_lower",
)


def _rolling(x: np.ndarray, window: int, how: str) -> np.ndarray:
    """pandas' rolling(window, min_periods=window).<how>() on a numpy array, without pandas' per-call cost:
    a window holding a NaN is NaN, the first window-1 rows are warm-up NaN."""
    out = np.full(len(x), np.nan)
    if len(x) < window:
        return out
    if how == "mean":
        # running sums: the windowed sum is a difference of two prefix sums (rounding ~1e-12 of the price, far
        # inside the 1e-9 pin), and a NaN anywhere in the window is put back afterwards
        filled = np.where(np.isnan(x), 0.0, x)
        sums = np.cumsum(np.concatenate(([0.0], filled)))
        out[window - 1 :] = (sums[window:] - sums[:-window]) / window
        holes = np.cumsum(np.concatenate(([0], np.isnan(x).astype(np.int64))))
        out[window - 1 :][(holes[window:] - holes[:-window]) > 0] = np.nan
        return out
    if how == "std":  # population std (ddof=0), like ta's Bollinger bands and TA-Lib; pandas' online
        # algorithm is ta's own and 2.5x faster than a sliding-window std
        return pd.Series(x).rolling(window, min_periods=window).std(ddof=0).to_numpy()
    view = np.lib.stride_tricks.sliding_window_view(x, window)
    if how == "max":
        out[window - 1 :] = view.max(axis=1)
    else:
        out[window - 1 :] = view.min(axis=1)
    return out


def _shift(x: np.ndarray) -> np.ndarray:
    return np.concatenate(([np.nan], x[:-1])) if len(x) else x.copy()


def _ewm(x: np.ndarray, *, span: int | None = None, alpha: float | None = None, min_periods: int) -> np.ndarray:
    # pandas' ewm is already compiled; only the Series around it is overhead
    return pd.Series(x).ewm(span=span, alpha=alpha, min_periods=min_periods, adjust=False).mean().to_numpy()


def _close_arrays(c: np.ndarray) -> dict[str, np.ndarray]:
    """The `ta` formulas (RSIIndicator, MACD 12/26/9, SMA, EMA, BollingerBands 20/2, all fillna=False) on numpy
    arrays: the same arithmetic in the same order, so equal to ta within float rounding (pinned to 1e-9 on every
    bundled symbol, tests/unit/test_indicators_vs_ta.py); 5x faster than the ta objects on a 2,500-bar history."""
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = c - _shift(c)
        # ta: diff.where(diff > 0, 0.0): the first bar's NaN difference counts as 0.0
        up = np.where(diff > 0, diff, 0.0)
        down = np.where(diff < 0, -diff, 0.0)
        emaup, emadn = _ewm(up, alpha=1 / 14, min_periods=14), _ewm(down, alpha=1 / 14, min_periods=14)
        rsi = np.where(emadn == 0, 100.0, 100 - (100 / (1 + emaup / emadn)))
        macd = _ewm(c, span=12, min_periods=12) - _ewm(c, span=26, min_periods=26)
        signal = _ewm(macd, span=9, min_periods=9)
        sma20 = _rolling(c, 20, "mean")
        std20 = _rolling(c, 20, "std")
    return {
        "close": c,
        "prev_close": _shift(c),
        "rsi14": rsi,
        "macd": macd,
        "macd_signal": signal,
        "macd_hist": macd - signal,
        "sma20": sma20,
        "sma50": _rolling(c, 50, "mean"),
        "sma200": _rolling(c, 200, "mean"),
        "ema20": _ewm(c, span=20, min_periods=20),
        "bb_upper": sma20 + 2 * std20,
        "bb_middle": sma20,
        "bb_lower": sma20 - 2 * std20,
    }


def close_indicators(close: pd.Series) -> dict[str, pd.Series]:
    """Indicators that need closes only. Warm-up rows are NaN (fillna=False everywhere)."""
    return {k: pd.Series(v, index=close.index) for k, v in _close_arrays(close.to_numpy("float64")).items()}


def _wilder_atr(high: np.ndarray, low: np.ndarray, close: np.ndarray, window: int) -> np.ndarray:
    prev_close = _shift(close)
    # the first bar has no previous close: its true range is high - low (ta's row-wise max skips the NaN)
    tr = np.fmax(high - low, np.fmax(np.abs(high - prev_close), np.abs(low - prev_close)))
    out = np.full(len(close), np.nan)
    if len(close) < window:
        return out
    seeded = np.concatenate(([tr[:window].mean()], tr[window:]))
    out[window - 1 :] = _ewm(seeded, alpha=1.0 / window, min_periods=0)
    return out


def wilder_atr(high: pd.Series, low: pd.Series, close: pd.Series, window: int = ATR_WINDOW) -> pd.Series:
    """`ta.volatility.AverageTrueRange` without its Python loop (70% of a full-history frame's time, by
    cProfile): the seed is the mean true range of the first `window` bars, then Wilder's smoothing
    atr[i] = (atr[i-1]·(n-1) + tr[i]) / n, which is an exponential mean with alpha 1/n started at the seed.
    Pinned to ta within 1e-9 on every bundled symbol (tests/unit/test_features.py). Warm-up rows are NaN."""
    h, lo, c = (x.to_numpy("float64") for x in (high, low, close))
    return pd.Series(_wilder_atr(h, lo, c, window), index=close.index)


def compute_indicator_frame(bars: pd.DataFrame) -> pd.DataFrame:
    """All indicator columns for `bars` (ascending daily OHLCV), same index. Computed on numpy arrays and
    assembled once: pandas' per-operation cost was most of a frame's time (bench/bench_features.py)."""
    high, low, close, open_, volume = (bars[c].to_numpy("float64") for c in ("high", "low", "close", "open", "volume"))
    cols = _close_arrays(close)
    cols["volume"] = volume
    with np.errstate(invalid="ignore", divide="ignore"):
        atr = _wilder_atr(high, low, close, ATR_WINDOW)
        # a zero ATR would read as "no volatility" (ta's warm-up is 0.0 too), so it is masked like the warm-up
        atr = np.where(atr > 0, atr, np.nan)
        atr[:ATR_WINDOW] = np.nan
        cols["atr14"] = atr

        cols["swing_high"] = _rolling(high, SWING_WINDOW, "max")
        cols["swing_low"] = _rolling(low, SWING_WINDOW, "min")
        support = _shift(_rolling(low, LEVEL_WINDOW, "min"))
        resistance = _shift(_rolling(high, LEVEL_WINDOW, "max"))
        cols["support"], cols["resistance"] = support, resistance
        cols["dist_to_support_pct"] = (close - support) / close * 100.0
        cols["dist_to_resistance_pct"] = (resistance - close) / close * 100.0

        prev_close = cols["prev_close"]
        cols["gap_pct"] = (open_ - prev_close) / prev_close * 100.0
        avg20 = _shift(_rolling(volume, 20, "mean"))
        cols["volume_vs_avg20"] = np.where(avg20 > 0, volume / avg20, np.nan)

    matrix = (
        np.column_stack([cols[c] for c in INDICATOR_COLUMNS]) if len(bars) else np.empty((0, len(INDICATOR_COLUMNS)))
    )
    return pd.DataFrame(matrix, index=bars.index, columns=_COLUMNS_INDEX)


class _Entry:
    """One symbol's frame plus raw numpy columns, so the hot path skips pandas indexing."""

    __slots__ = ("frame", "dates", "arrays", "matrix", "ohlcv", "_date_strs")

    def __init__(self, frame: pd.DataFrame, bars: pd.DataFrame | None = None) -> None:
        self.frame = frame
        self.dates = frame.index.values
        # raw bars kept beside the indicators so a bundle's price history needs no pandas
        self.ohlcv = (
            None
            if bars is None
            else np.column_stack([bars[c].to_numpy("float64") for c in ("open", "high", "low", "close", "volume")])
        )
        self._date_strs: list[str] | None = None
        self.matrix = frame.to_numpy(dtype="float64", copy=True)
        self.matrix.flags.writeable = False
        self.arrays = {c: self.matrix[:, i] for i, c in enumerate(frame.columns)}

    @property
    def date_strs(self) -> list[str]:
        # made on first use (a bundle's price history): 1-2 ms a symbol that a full-history warm-up need not pay
        if self._date_strs is None:
            self._date_strs = self.frame.index.strftime("%Y-%m-%d").tolist()
        return self._date_strs


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
