"""Write docs/examples/acme.csv: two years of daily bars for ACME, a FICTIONAL company (the prices are a seeded
random walk, not market data), one row per NYSE session, in the price-file format of agent/data/README.md.

    .venv/bin/python docs/examples/make_acme.py [OUT.csv]

The same seed gives the same bytes on every machine, so the walkthrough's numbers (docs/own-data.md) reproduce.
"""

from __future__ import annotations

import sys
from pathlib import Path

import exchange_calendars as xcals
import numpy as np
import pandas as pd

SYMBOL, FIRST, LAST, SEED = "ACME", "2023-01-03", "2024-12-31", 4


def acme_bars() -> pd.DataFrame:
    # NYSE sessions only: a cycle's as-of must be a session its market trades, with a bar on it
    days = xcals.get_calendar("XNYS").sessions_in_range(FIRST, LAST)
    rng = np.random.default_rng(SEED)
    # a walk that rises for ~300 sessions and then falls (this seed: 40 -> 85 -> 47), so trend and momentum
    # features have something to see
    drift = np.where(np.arange(len(days)) < 300, 0.0009, -0.0006)
    close = 40.0 * np.exp(np.cumsum(drift + rng.normal(0, 0.016, len(days))))
    open_ = close * np.exp(rng.normal(0, 0.006, len(days)))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.008, len(days))))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.008, len(days))))
    volume = rng.integers(800_000, 2_400_000, len(days))
    return pd.DataFrame(
        {
            "symbol": SYMBOL,
            "date": days.strftime("%Y-%m-%d"),
            "open": open_.round(2),
            "high": high.round(2),
            "low": low.round(2),
            "close": close.round(2),
            "volume": volume,
        }
    )


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("acme.csv"))
    bars = acme_bars()
    out.parent.mkdir(parents=True, exist_ok=True)
    bars.to_csv(out, index=False)
    print(f"wrote {out}: {len(bars)} bars of {SYMBOL} (fictional), {bars.date.iloc[0]}..{bars.date.iloc[-1]}")
