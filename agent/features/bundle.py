"""FeatureBundle assembly: the only numbers an agent may cite.

Values are rounded once here so the same bundle prints identically in every prompt, and any
NaN/inf (indicator warm-up) becomes None, never 0.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pandas as pd

from agent.data.fundamentals import FundamentalsSource, default_fundamentals
from agent.data.market import DataError, DateLike, MarketData, default_market_data, parse_date
from agent.data.news import NewsSource, default_news
from agent.features.forecast import WINDOW as FORECAST_WINDOW
from agent.features.forecast import price_forecast
from agent.features.news import news_features
from agent.features.technical import CLOSE_ONLY_COLUMNS, INDICATOR_COLUMNS, IndicatorCache, close_indicators
from agent.input_window import TRADEGRAPH, InputWindow
from agent.markets import CalendarRangeError, MarketProfile, bar_cutoff, get_profile, trading_days
from schemas.features import (
    MISSING_MAX,
    FeatureBundle,
    Fundamentals,
    NewsFeatures,
    PriceBar,
    SentimentFeatures,
    TechnicalFeatures,
)

FORECAST_HORIZON = 10
FALLBACK_MIN_BARS = 1
HISTORY_BARS = 20  # raw bars attached as `history` (schema allows up to 60)

_CACHE = IndicatorCache()

# Schema bounds, checked before construction so one freak value drops to None instead of
# failing the whole bundle.
_POSITIVE = {
    "close",
    "prev_close",
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
}
_PCT = {"dist_to_support_pct", "dist_to_resistance_pct", "gap_pct"}


def default_cache() -> IndicatorCache:
    return _CACHE


def round_value(x: float | None) -> float | None:
    """4 decimals for |x| >= 1, 4 significant digits below; NaN/inf -> None."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    if abs(x) < 1e-9:
        return 0.0  # float noise (e.g. close == resistance) must not print as 1.6e-12
    if abs(x) >= 1.0:
        return round(x, 4)
    return round(x, 3 - int(math.floor(math.log10(abs(x)))))


def _clean(name: str, x: float | None) -> float | None:
    v = round_value(x)
    if v is None:
        return None
    if name == "volume":
        return float(round(v)) if v >= 0 else None
    if name in _POSITIVE and not (0 < v < 1e7):
        return None
    if name in _PCT and not (-1000 <= v <= 1000):
        return None
    if name == "rsi14":
        return min(100.0, max(0.0, v))
    if name == "volume_vs_avg20" and v < 0:
        return None
    return v


def technical_from_values(values: dict[str, float], bars_available: int) -> TechnicalFeatures:
    fields: dict[str, Any] = {name: _clean(name, values.get(name)) for name in INDICATOR_COLUMNS}
    if fields["close"] is None:
        raise DataError("no valid close price at the as-of date")
    return TechnicalFeatures(**fields, bars_available=bars_available)


def _history(entry: Any, i: int, n: int) -> list[PriceBar]:
    if entry.ohlcv is None or n <= 0:
        return []
    lo = max(0, i + 1 - n)
    rows = entry.ohlcv[lo : i + 1].tolist()
    out = []
    for d, (o, h, low, c, v) in zip(entry.date_strs[lo : i + 1], rows):
        out.append(
            PriceBar(date=d, open=_price(o), high=_price(h), low=_price(low), close=_price(c), volume=float(round(v)))
        )
    return out


def _price(x: float) -> float:
    v = round_value(x)
    if v is None:  # the loader refuses a bar that is not a finite number (agent/data/finite.py): never seen here
        raise DataError(f"a price bar holds {x}, not a price")
    return v


def _missing_sessions(entry: Any, lo: int, i: int, cutoff: pd.Timestamp, profile: MarketProfile) -> list[str]:
    """Sessions of the market's calendar from bar `lo` through `cutoff` with no bar: the gaps in the window a
    decision reads (the latest MISSING_MAX). A window the calendar does not cover lists none (nothing to hold
    the bars against)."""
    if i < lo:
        return []
    sessions = _sessions(profile, pd.Timestamp(entry.dates[lo]), cutoff)
    if sessions is None:
        return []
    missing = sessions[~np.isin(sessions.values, entry.dates[lo : i + 1])]
    return missing.strftime("%Y-%m-%d").tolist()[-MISSING_MAX:]


@functools.lru_cache(maxsize=1024)
def _sessions(profile: MarketProfile, start: pd.Timestamp, end: pd.Timestamp) -> pd.DatetimeIndex | None:
    """The calendar's sessions in [start, end] (None outside the calendar's range): the same window for every symbol
    of a decision point, asked once (an index is immutable)."""
    try:
        return pd.DatetimeIndex(trading_days(profile, start, end)).as_unit("ns")
    except CalendarRangeError:
        return None


def _sentiment(news: NewsFeatures) -> SentimentFeatures:
    has_news = news.unique_count > 0
    return SentimentFeatures(news_sentiment=news.net_sentiment if has_news else None, news_items=news.unique_count)


def build_bundle(
    symbol: str,
    as_of: DateLike,
    market: MarketData | None = None,
    news: NewsSource | None = None,
    fundamentals: FundamentalsSource | None = None,
    cache: IndicatorCache | None = None,
    history_bars: int = HISTORY_BARS,
    profile: str | MarketProfile | None = None,
    window: InputWindow = TRADEGRAPH,
) -> FeatureBundle:
    """The evidence for `symbol` as known at the decision on `as_of` in the market `profile` (default US, at the
    close): no bar the decision cannot read whole (at the open: none dated `as_of`, whose opening price alone is
    given as `open_price`), and no headline or filing published at or after the decision time; the headlines those
    of the input `window` (agent/input_window.py: tradegraph's, or a StockBench run's)."""
    market = market if market is not None else default_market_data()
    news = news if news is not None else default_news()
    fundamentals = fundamentals if fundamentals is not None else default_fundamentals()
    cache = cache if cache is not None else _CACHE
    day = parse_date(as_of)
    profile = get_profile(profile)
    cutoff = bar_cutoff(profile, day)

    entry = cache.entry(symbol, market)
    i = int(entry.dates.searchsorted(cutoff.to_datetime64(), side="right")) - 1
    if i < 0:
        first, last = market.date_range(symbol)
        raise DataError(f"no bar for {symbol} on or before {cutoff.date()} (data {first.date()}..{last.date()})")
    open_price = None
    if profile.decide_at == "open":
        if entry.ohlcv is None or i + 1 >= len(entry.dates) or entry.dates[i + 1] != day.to_datetime64():
            raise DataError(f"no {symbol} bar on {day.date()}: no opening price to decide at")
        open_price = round_value(float(entry.ohlcv[i + 1][0]))
    values = dict(zip(INDICATOR_COLUMNS, entry.matrix[i].tolist()))
    technical = technical_from_values(values, i + 1)

    closes = entry.arrays["close"][max(0, i - FORECAST_WINDOW) : i + 1]
    nf = news_features(news.headlines(symbol, day, window.coarse_news_days, profile), day, profile, window)
    return FeatureBundle(
        symbol=symbol,
        as_of=str(day.date()),
        technical=technical,
        news=nf,
        sentiment=_sentiment(nf),
        fundamentals=fundamentals.get(symbol, day, profile, market=market),  # P/E priced on the run's bars
        forecast=price_forecast(closes, FORECAST_HORIZON),
        history=_history(entry, i, history_bars),
        open_price=open_price,
        missing_sessions=_missing_sessions(entry, max(0, i + 1 - history_bars), i, cutoff, profile),
    )


def fallback_bundle(
    symbol: str,
    as_of: DateLike,
    closes: list[float],
    headlines: list[dict] | None = None,
    profile: str | MarketProfile | None = None,
) -> FeatureBundle:
    """A bundle from recent closes only (plus headlines if the feed has them); fallback=True.

    Close-only indicators are computed; those needing high/low/open/volume are None, and
    `history` stays empty (inventing open/high/low from closes would be fabricated data).
    """
    c = np.asarray([float(x) for x in closes], dtype="float64")
    c = c[np.isfinite(c) & (c > 0)]
    if len(c) < FALLBACK_MIN_BARS:
        raise DataError(f"cannot build a fallback bundle for {symbol}: no valid closes")
    day = parse_date(as_of)
    series = pd.Series(c)
    cols = close_indicators(series)
    values = {name: float(cols[name].iloc[-1]) for name in CLOSE_ONLY_COLUMNS}
    technical = technical_from_values(values, len(c))
    nf = news_features(headlines or [], day, profile)
    return FeatureBundle(
        symbol=symbol,
        as_of=str(day.date()),
        fallback=True,
        technical=technical,
        news=nf,
        sentiment=_sentiment(nf),
        fundamentals=Fundamentals(available=False),
        forecast=price_forecast(c, FORECAST_HORIZON),
    )


def ensure_bundle(snapshot_like: dict, market: MarketData | None = None) -> dict:
    """Guarantee `snapshot_like['bundle']`: a feed that forgot it gets a fallback bundle.

    Uses the dict's 'closes' (and 'headlines' if present). If there are no closes but a
    `market` is given, the closes come from `market.as_of` so the evidence layer never
    silently switches off. Returns the same dict.
    """
    if snapshot_like.get("bundle") is not None:
        return snapshot_like
    symbol = snapshot_like["symbol"]
    as_of = snapshot_like["as_of"]
    closes = list(snapshot_like.get("closes") or [])
    if not closes and market is not None:
        closes = market.as_of(symbol, as_of, lookback=260)["close"].tolist()
    snapshot_like["bundle"] = fallback_bundle(symbol, as_of, closes, snapshot_like.get("headlines"))
    return snapshot_like
