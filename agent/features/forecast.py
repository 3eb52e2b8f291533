"""Baseline price forecast: drift plus a volatility band from recent log returns.

Evidence only. It deliberately has no knowledge of positions or risk, and nothing in the
risk/sizing path imports it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from schemas.features import PriceForecast

WINDOW = 60  # bars of log returns used
MIN_RETURNS = 20  # fewer than this and a volatility estimate is noise
Z_BAND = 1.6449  # two-sided 90% band under a normal approximation
METHOD = f"drift+vol band ({WINDOW}-bar log returns, 90% band)"


def _clamp(x: float) -> float:
    return max(-1000.0, min(1000.0, round(x, 4)))


def price_forecast(closes: pd.Series | np.ndarray | list[float], horizon_days: int = 10) -> PriceForecast | None:
    c = np.asarray(closes, dtype="float64")[-(WINDOW + 1) :]
    c = c[np.isfinite(c) & (c > 0)]
    if len(c) < MIN_RETURNS + 1:
        return None
    r = np.diff(np.log(c))
    mu = float(r.mean())
    sigma = float(r.std(ddof=1))
    h = int(horizon_days)
    centre = mu * h
    spread = Z_BAND * sigma * math.sqrt(h)
    return PriceForecast(
        horizon_days=h,
        expected_move_pct=_clamp(math.expm1(centre) * 100.0),
        band_low_pct=_clamp(math.expm1(centre - spread) * 100.0),
        band_high_pct=_clamp(math.expm1(centre + spread) * 100.0),
        method=METHOD,
    )
