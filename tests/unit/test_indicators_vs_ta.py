"""The indicator frame is computed on numpy arrays for speed; each column must still be `ta`'s, within 1e-9."""

import numpy as np
import pandas as pd
import pytest
from ta.momentum import RSIIndicator
from ta.trend import MACD, EMAIndicator, SMAIndicator
from ta.volatility import BollingerBands

from agent.data.market import default_market_data
from agent.features.technical import close_indicators, compute_indicator_frame


def ta_close(close: pd.Series) -> dict[str, pd.Series]:
    macd = MACD(close, window_slow=26, window_fast=12, window_sign=9, fillna=False)
    bb = BollingerBands(close, window=20, window_dev=2, fillna=False)
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


def pandas_levels(bars: pd.DataFrame) -> dict[str, pd.Series]:
    """The rolling levels as pandas writes them (the definitions in technical.py's docstring)."""
    high, low, close, open_, volume = (bars[c].astype("float64") for c in ("high", "low", "close", "open", "volume"))
    support = low.rolling(60, min_periods=60).min().shift(1)
    resistance = high.rolling(60, min_periods=60).max().shift(1)
    avg20 = volume.rolling(20, min_periods=20).mean().shift(1)
    return {
        "swing_high": high.rolling(20, min_periods=20).max(),
        "swing_low": low.rolling(20, min_periods=20).min(),
        "support": support,
        "resistance": resistance,
        "dist_to_support_pct": (close - support) / close * 100.0,
        "dist_to_resistance_pct": (resistance - close) / close * 100.0,
        "gap_pct": (open_ - close.shift(1)) / close.shift(1) * 100.0,
        "volume_vs_avg20": (volume / avg20).where(avg20 > 0),
    }


def assert_same(ours: pd.Series, theirs: pd.Series, name: str) -> None:
    a, b = ours.to_numpy(dtype=float), theirs.to_numpy(dtype=float)
    assert (np.isnan(a) == np.isnan(b)).all(), f"{name}: warm-up / missing rows differ"
    diff = np.abs(a - b)[~np.isnan(a)]
    assert diff.size == 0 or diff.max() < 1e-9, f"{name}: max |ours - ta| = {diff.max():.3e}"


@pytest.mark.parametrize("symbol", default_market_data().universe())
def test_every_column_equals_ta_and_pandas_within_1e_9(symbol):
    bars = default_market_data().bars(symbol)
    frame = compute_indicator_frame(bars)
    for name, theirs in {**ta_close(bars.close.astype("float64")), **pandas_levels(bars)}.items():
        assert_same(frame[name], theirs, name)


@pytest.mark.parametrize("n", [1, 13, 30, 199, 260])
def test_short_histories_match_ta_too(n):
    """The fallback bundle computes close-only indicators on short, index-less series."""
    close = pd.Series(default_market_data().bars("MSFT").close.to_numpy("float64")[:n])
    ours = close_indicators(close)
    for name, theirs in ta_close(close).items():
        assert_same(ours[name], theirs, name)


def test_a_missing_close_is_missing_in_every_window_that_holds_it():
    close = default_market_data().bars("IBM").close.astype("float64").iloc[:300].copy()
    close.iloc[150] = np.nan
    ours = close_indicators(close)
    for name, theirs in ta_close(close).items():
        assert_same(ours[name], theirs, name)
