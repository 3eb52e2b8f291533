"""Our `ta`-based indicators agree with TA-Lib on the real data once EMA seeding has washed out.

`ta` seeds EMAs/Wilder averages from the first value while TA-Lib seeds with an SMA; the
difference decays geometrically, so comparisons start after WARM bars. The tolerance is not
loosened to hide parameter mismatches.
"""

from __future__ import annotations

import numpy as np
import pytest

talib = pytest.importorskip("talib")

from agent.data.market import default_market_data  # noqa: E402
from agent.features.technical import compute_indicator_frame  # noqa: E402

WARM = 250
TOL = 1e-6


@pytest.fixture(scope="module", params=["AAPL", "MSFT", "IBM", "GOOG"])
def data(request):
    bars = default_market_data().bars(request.param)
    return bars, compute_indicator_frame(bars)


def _check(ours, theirs):
    ours = np.asarray(ours, dtype=float)[WARM:]
    theirs = np.asarray(theirs, dtype=float)[WARM:]
    assert not np.isnan(ours).any() and not np.isnan(theirs).any()
    assert np.max(np.abs(ours - theirs)) <= TOL


def test_rsi(data):
    bars, f = data
    _check(f.rsi14, talib.RSI(bars.close.to_numpy(), timeperiod=14))


def test_macd(data):
    bars, f = data
    macd, signal, hist = talib.MACD(bars.close.to_numpy(), fastperiod=12, slowperiod=26, signalperiod=9)
    _check(f.macd, macd)
    _check(f.macd_signal, signal)
    _check(f.macd_hist, hist)


@pytest.mark.parametrize("n", [20, 50, 200])
def test_sma(data, n):
    bars, f = data
    _check(f[f"sma{n}"], talib.SMA(bars.close.to_numpy(), timeperiod=n))
    # SMAs have no seeding: they agree from the first defined value
    ours = f[f"sma{n}"].to_numpy()
    theirs = talib.SMA(bars.close.to_numpy(), timeperiod=n)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))


def test_ema20(data):
    bars, f = data
    _check(f.ema20, talib.EMA(bars.close.to_numpy(), timeperiod=20))


def test_atr14(data):
    bars, f = data
    theirs = talib.ATR(bars.high.to_numpy(), bars.low.to_numpy(), bars.close.to_numpy(), timeperiod=14)
    _check(f.atr14, theirs)
    # same warm-up length as TA-Lib: first 14 bars undefined
    assert np.array_equal(np.isnan(f.atr14.to_numpy()[:30]), np.isnan(theirs[:30]))


def test_bollinger(data):
    bars, f = data
    up, mid, low = talib.BBANDS(bars.close.to_numpy(), timeperiod=20, nbdevup=2, nbdevdn=2, matype=0)
    _check(f.bb_upper, up)
    _check(f.bb_middle, mid)
    _check(f.bb_lower, low)
