"""FeatureBundle: the deterministic evidence attached to every snapshot.

These are the only numbers an agent may cite. A value still in indicator warm-up is
None, never 0, so "not yet known" can't be mistaken for a real reading.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import ConfigDict, Field, StringConstraints

from schemas.base import Contract, IsoDate, Pct, Price, Stance, Symbol, Unit, unset

# the most missing sessions a bundle lists (the latest ones)
MISSING_MAX = 60

EventClass = Literal["earnings", "guidance", "rating", "regulatory", "macro", "other"]


class TechnicalFeatures(Contract):
    close: Price
    prev_close: Optional[Price] = None
    rsi14: Optional[float] = Field(default=None, ge=0, le=100)
    macd: Optional[float] = None
    macd_signal: Optional[float] = None
    macd_hist: Optional[float] = None
    sma20: Optional[Price] = None
    sma50: Optional[Price] = None
    sma200: Optional[Price] = None
    ema20: Optional[Price] = None
    atr14: Optional[float] = Field(default=None, gt=0)
    bb_upper: Optional[Price] = None
    bb_middle: Optional[Price] = None
    bb_lower: Optional[Price] = None
    swing_high: Optional[Price] = None
    swing_low: Optional[Price] = None
    support: Optional[Price] = None
    resistance: Optional[Price] = None
    dist_to_support_pct: Optional[Pct] = None
    dist_to_resistance_pct: Optional[Pct] = None
    gap_pct: Optional[Pct] = None
    volume: Optional[float] = Field(default=None, ge=0)
    volume_vs_avg20: Optional[float] = Field(default=None, ge=0)
    bars_available: int = Field(ge=0)


class NewsItemFeature(Contract):
    published_at: str
    headline: str = Field(max_length=1000)
    source: str = Field(max_length=200)
    event_class: EventClass
    recency_weight: Unit
    sentiment: Stance


class NewsFeatures(Contract):
    items: list[NewsItemFeature] = Field(default_factory=list, max_length=50)
    unique_count: int = Field(ge=0)
    duplicates_removed: int = Field(ge=0)
    net_sentiment: Stance = 0.0


class SentimentFeatures(Contract):
    news_sentiment: Optional[Stance] = None
    news_items: int = Field(ge=0)
    positioning_feed_wired: Literal[False] = False


# a date, or an ISO datetime (zone optional)
IsoStamp = Annotated[
    str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")
]


def _absent(value) -> bool:
    """exclude_if of a field added after recordings were made: not written while None, so a bundle that does not
    use it dumps as before and an older recording replays identical."""
    return value is None


class Fundamentals(Contract):
    # a NaN or an infinity is no figure: refused here as well as by every loader
    model_config = ConfigDict(allow_inf_nan=False)

    available: bool
    source: Optional[str] = None
    as_of: Optional[IsoDate] = None  # the period end the figures describe (the latest filing they draw on)
    reported_at: Optional[IsoStamp] = None  # when they became public: the record is visible only after this
    pe: Optional[float] = None
    pb: Optional[float] = None
    ev_ebitda: Optional[float] = None
    revenue_growth_pct: Optional[Pct] = None
    net_margin_pct: Optional[Pct] = None
    # computed by code from filings (agent/data/stockbench/filings.py); None, and not written, where a filing lacks
    # what they need or a source does not compute them
    eps_ttm: Optional[float] = Field(default=None, gt=-1e5, lt=1e5, exclude_if=_absent)  # diluted, last 4 quarters
    gross_margin_pct: Optional[Pct] = Field(default=None, exclude_if=_absent)
    operating_margin_pct: Optional[Pct] = Field(default=None, exclude_if=_absent)
    current_ratio: Optional[float] = Field(default=None, ge=0, lt=1e4, exclude_if=_absent)
    debt_to_equity: Optional[float] = Field(default=None, gt=-1e4, lt=1e4, exclude_if=_absent)  # long-term debt/equity
    # the close P/E and P/B divide (the last one the decision may know) and the bar it closed
    price: Optional[Price] = Field(default=None, exclude_if=_absent)
    price_date: Optional[IsoDate] = Field(default=None, exclude_if=_absent)
    basis: Optional[str] = Field(default=None, max_length=300, exclude_if=_absent)  # how they were computed, in words


class PriceForecast(Contract):
    """Evidence only: by construction this type never reaches sizing or risk."""

    horizon_days: int = Field(ge=1, le=260)
    expected_move_pct: Pct
    band_low_pct: Pct
    band_high_pct: Pct
    method: str = "drift+vol band"


class PriceBar(Contract):
    date: IsoDate
    open: Price
    high: Price
    low: Price
    close: Price
    volume: float = Field(ge=0)


class FeatureBundle(Contract):
    symbol: Symbol
    as_of: IsoDate
    fallback: bool = False
    technical: TechnicalFeatures
    news: NewsFeatures
    sentiment: SentimentFeatures
    fundamentals: Fundamentals
    forecast: Optional[PriceForecast] = None
    # the last bars a decision on as_of may read whole (through as_of at the close, the session before at the
    # open): the only raw prices a tool may hand a model
    history: list[PriceBar] = Field(default_factory=list, max_length=60)
    # deciding at the open: as_of's opening price, the only number of that day's bar the decision knows (it is
    # the price orders are sized, checked and filled at). None, and not written, at the close
    open_price: Optional[Price] = Field(default=None, exclude_if=unset)
    # sessions of the market's calendar from the first history bar through the last bar the decision may read
    # that have no bar in the data: a gap, shown rather than bridged silently (the latest MISSING_MAX of them)
    missing_sessions: list[IsoDate] = Field(default_factory=list, max_length=MISSING_MAX, exclude_if=unset)
