"""Deterministic news features: event class, recency weight, de-duplication, lexicon sentiment.

Rule-based on purpose: the same headlines always give the same numbers, so an agent's cited
evidence can be re-derived in an audit.
"""

from __future__ import annotations

import functools
import math
import re
from typing import NamedTuple

import pandas as pd

from agent.data.market import DataError, DateLike, parse_date
from agent.features.dedupe import Deduper, Story, story_of
from agent.fence import neutralise
from agent.input_window import TRADEGRAPH, InputWindow
from agent.markets import MarketProfile, Stamp, decision_time, parse_stamp, published_time, visible
from schemas.features import NewsFeatures, NewsItemFeature

HALF_LIFE_DAYS = 7.0
MAX_HEADLINE = 500
_DAY_NS = pd.Timedelta(days=1).value

# First matching class wins; more specific classes come first ("analyst cuts rating after
# earnings" is a rating event; "raises outlook with results" is guidance).
_EVENT_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "regulatory",
        (
            "sec",
            "antitrust",
            "lawsuit",
            "sues",
            "sued",
            "probe",
            "investigation",
            "regulator",
            "regulators",
            "ftc",
            "doj",
            "justice department",
            "european commission",
            "eu",
            "fine",
            "fined",
            "court",
            "ruling",
            "patent",
            "settlement",
            "subpoena",
            "recall",
            "fda",
        ),
    ),
    (
        "rating",
        (
            "upgrade",
            "upgrades",
            "upgraded",
            "downgrade",
            "downgrades",
            "downgraded",
            "price target",
            "rating",
            "overweight",
            "underweight",
            "outperform",
            "underperform",
            "initiates coverage",
            "analyst",
            "analysts",
        ),
    ),
    (
        "guidance",
        ("guidance", "outlook", "forecast", "forecasts", "sees", "projects", "warns", "profit warning", "expects"),
    ),
    (
        "earnings",
        (
            "earnings",
            "quarterly",
            "quarter",
            "profit",
            "revenue",
            "revenues",
            "eps",
            "results",
            "q1",
            "q2",
            "q3",
            "q4",
            "net income",
            "sales",
        ),
    ),
    (
        "macro",
        (
            "fed",
            "federal reserve",
            "interest rate",
            "interest rates",
            "inflation",
            "gdp",
            "jobs report",
            "payrolls",
            "recession",
            "economy",
            "economic",
            "unemployment",
            "treasury",
            "tariff",
            "tariffs",
            "oil prices",
            "stimulus",
            "debt ceiling",
            "credit crisis",
            "eurozone",
        ),
    ),
)

_POSITIVE = frozenset(
    """
beat beats beating tops topped surge surges surged soar soars soared jump jumps jumped rise rises rose
gain gains gained record strong stronger growth grows grew rally rallies rallied win wins won approval
approves approved boost boosts boosted upgrade upgrades upgraded outperform bullish exceed exceeds
exceeded raise raises raised higher climbs climbed rebound rebounds expands expansion breakthrough
dividend buyback robust optimistic upbeat momentum success successful launch launches popular
""".split()
)
_NEGATIVE = frozenset(
    """
miss misses missed fall falls fell drop drops dropped plunge plunges plunged slump slumps slumped cut
cuts weak weaker weakness lawsuit sues sued probe fine fined recall recalls loss losses decline declines
declined warn warns warning investigation antitrust delay delays delayed lower lowers lowered layoffs
bearish underperform fraud downgrade downgrades downgraded slowdown slows slowing sink sinks sank
tumble tumbles tumbled concern concerns worries worry disappointing disappoints shortfall halt halts
recession crisis default defect defects outage glitch resigns resignation scandal violation violations
""".split()
)
_NEGATORS = frozenset({"not", "no", "never", "without", "fails", "fail", "failed"})
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text.lower())


def normalise_text(text: str) -> str:
    return " ".join(tokens(text))


def event_class(headline: str) -> str:
    norm = f" {normalise_text(headline)} "
    for cls, words in _EVENT_RULES:
        if any(f" {w} " in norm for w in words):
            return cls
    return "other"


def lexicon_sentiment(headline: str) -> float:
    """(pos - neg) / (pos + neg + 1): one clear word gives ±0.5, never saturates at ±1."""
    pos = neg = 0
    prev = ""
    for tok in tokens(headline):
        polarity = (tok in _POSITIVE) - (tok in _NEGATIVE)
        if polarity and prev in _NEGATORS:
            polarity = -polarity
        if polarity > 0:
            pos += 1
        elif polarity < 0:
            neg += 1
        prev = tok
    return (pos - neg) / (pos + neg + 1)


def recency_weight(published: pd.Timestamp, as_of_day: pd.Timestamp) -> float:
    """exp decay with a 7-day half-life; anything published on the as-of day weighs 1."""
    age_days = max(0.0, (as_of_day.value - published.value) / _DAY_NS)  # pandas' own Timedelta / Timedelta
    return math.pow(0.5, age_days / HALF_LIFE_DAYS)


def _r(x: float) -> float:
    return round(x, 4)


class _Shown(NamedTuple):
    """A headline as a prompt shows it (neutralised, one line, bounded) and what code derives from its text."""

    text: str
    story: Story
    event_class: str
    sentiment: float


# Memoised per text: a backtest's overlapping 30-day windows show each headline about 20 times, and
# neutralising, classifying and scoring walk its characters in Python
@functools.lru_cache(maxsize=16384)
def _shown(headline: str) -> _Shown:
    text = neutralise(headline)[:MAX_HEADLINE]
    return _Shown(text, story_of(normalise_text(text)), event_class(text), lexicon_sentiment(text))


@functools.lru_cache(maxsize=1024)
def _source(source: str) -> str:
    return neutralise(source)[:200] or "unknown"


@functools.lru_cache(maxsize=16384)
def _stamp(published_at: str) -> Stamp:
    return parse_stamp(published_at)


def _identities(h: dict) -> set[tuple[str, str]]:
    """The feed's own identity of an item, where it gives one: the same id or url is the same article."""
    return {(k, str(h[k])) for k in ("id", "url") if h.get(k) not in (None, "")}


def news_features(
    headlines: list[dict],
    as_of: DateLike,
    profile: str | MarketProfile | None = None,
    window: InputWindow = TRADEGRAPH,
) -> NewsFeatures:
    """Features of the headlines known before the decision time of `as_of` in the market `profile` (default US
    at the close), at most `window.news_items` of them, the newest; a window of hours (StockBench's 48) keeps only
    those published in that many hours before the decision time. Duplicates count once: an item repeating an
    earlier one's id or url, or the same story as a kept headline (agent/features/dedupe.py), is dropped; the
    first report is the one kept."""
    day = parse_date(as_of)
    since = None if window.news_hours is None else decision_time(profile, day) - pd.Timedelta(hours=window.news_hours)
    shown = []
    for n, h in enumerate(headlines):
        try:
            published = h["published_at"]
            stamp = _stamp(published) if isinstance(published, str) else parse_stamp(published)
            ts, known = stamp.ts, visible(stamp, day, profile)
            # published_time: a date alone counts from that day's close, as for visibility
            recent = since is None or published_time(stamp, profile) >= since
        except (KeyError, TypeError, ValueError):
            raise DataError(f"headline {n}: missing or unparseable published_at") from None
        if known and recent:
            shown.append((ts, h))
    shown.sort(key=lambda p: (p[0], str(p[1].get("headline", ""))))  # chronological: the first report is kept
    deduper = Deduper()
    seen_ids: set[tuple[str, str]] = set()
    kept: list[tuple[pd.Timestamp, dict, _Shown]] = []
    duplicates = 0
    for ts, h in shown:
        view = _shown(str(h.get("headline", "")))
        if not view.text:
            continue  # nothing left to show after neutralising
        ids = _identities(h)
        if seen_ids & ids or not deduper.offer(view.story):
            duplicates += 1
        else:
            kept.append((ts, h, view))
        seen_ids |= ids
    if window.summarise_shown:  # the count and sentiment of what the agents read, not of headlines they never see
        kept = kept[-window.news_items :]

    weighted = total_w = 0.0
    weights = []
    for ts, _, view in kept:
        w = recency_weight(ts, day)
        weights.append(w)
        weighted += w * view.sentiment
        total_w += w
    net = _r(weighted / total_w) if total_w > 0 else 0.0
    items = [
        NewsItemFeature(
            published_at=str(h["published_at"]),
            headline=view.text,
            source=_source(str(h.get("source") or "unknown")),
            event_class=view.event_class,
            recency_weight=_r(w),
            sentiment=_r(view.sentiment),
        )
        for (ts, h, view), w in zip(reversed(kept), reversed(weights))
    ][: window.news_items]  # newest first
    return NewsFeatures(
        items=items,
        unique_count=len(kept),
        duplicates_removed=duplicates,
        net_sentiment=max(-1.0, min(1.0, net)),
    )
