"""Synthetic daily bars written as an own-data prices CSV (agent/data/market.py reads it like a user's file)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from agent.data.market import MarketData, load_market_data
from agent.markets import trading_days


def write_prices(
    path: Path,
    symbols: Iterable[str],
    start: str,
    end: str,
    *,
    gaps: Optional[dict] = None,
    seed: int = 3,
    drift: float = 0.002,
    noise: float = 0.006,
) -> MarketData:
    """A random walk per symbol on the US calendar's sessions in [start, end], rising by `drift` a day on average
    (the offline agent buys a steady rise), without the bars `gaps` names per symbol."""
    rng = np.random.default_rng(seed)
    rows = []
    for k, sym in enumerate(symbols):
        price = 40.0 + 7 * k
        for d in trading_days("us_equity", start, end):
            o = price * (1 + rng.normal(0.0005, noise * 0.7))
            c = o * (1 + rng.normal(drift, noise))
            price, day = c, d.strftime("%Y-%m-%d")
            if day not in (gaps or {}).get(sym, ()):
                rows.append((sym, day, o, max(o, c) * 1.003, min(o, c) * 0.997, c, 1e6 + k))
    pd.DataFrame(rows, columns=["symbol", "date", "open", "high", "low", "close", "volume"]).to_csv(path, index=False)
    return load_market_data(path)
