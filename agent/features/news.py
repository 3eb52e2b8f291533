"""Deterministic news features: event class, recency weight, de-duplication, lexicon sentiment.

Rule-based on purpose: the same headlines always give the same numbers, so an agent's cited
evidence can be re-derived in an audit.
"""
from __future__ import annotations

import difflib
import math
import re

import pandas as pd

from agent.data.market import DataError, DateLike, parse_date
from agent.fence import neutralise
from agent.markets import MarketProfile, parse_stamp, visible
from schemas.features import NewsFeatures, NewsItemFeature

HALF_LIFE_DAYS = 7.0
JACCARD_DUP = 0.8
DIFFLIB_DUP = 0.9
MAX_ITEMS = 50
MAX_HEADLINE = 500
_DAY = pd.Timedelta(days=1)

# First matching class wins; more specific classes come first ("analyst cuts rating after
# earnings" is a rating event; "raises outlook with results" is guidance).
_EVENT_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("regulatory", ("sec", "antitrust", "lawsuit", "sues", "sued", "probe", "investigation", "regulator",
                    "regulators", "ftc", "doj", "justice department", "european commission", "eu", "fine",
                    "fined", "court", "ruling", "patent", "settlement", "subpoena", "recall", "fda")),
    ("rating", ("upgrade", "upgrades", "upgraded", "downgrade", "downgrades", "downgraded", "price target",
                "rating", "overweight", "underweight", "outperform", "underperform", "initiates coverage",
                "analyst", "analysts")),
    ("guidance", ("guidance", "outlook", "forecast", "forecasts", "sees", "projects", "warns", "profit warning",
                  "expects")),
    ("earnings", ("earnings", "quarterly", "quarter", "profit", "revenue", "revenues", "eps", "results",
                  "q1", "q2", "q3", "q4", "net income", "sales")),
    ("macro", ("fed", "federal reserve", "interest rate", "interest rates", "inflation", "gdp", "jobs report",
               "payrolls", "recession", "economy", "economic", "unemployment", "treasury", "tariff",
               "tariffs", "oil prices", "stimulus", "debt ceiling", "credit crisis", "eurozone")),
)

_POSITIVE = frozenset("""
beat beats beating tops topped surge surges surged soar soars soared jump jumps jumped rise rises rose
gain gains gained record strong stronger growth grows grew rally rallies rallied win wins won approval
approves approved boost boosts boosted upgrade upgrades upgraded outperform bullish exceed exceeds
exceeded raise raises raised higher climbs climbed rebound rebounds expands expansion breakthrough
dividend buyback robust optimistic upbeat momentum success successful launch launches popular
""".split())
_NEGATIVE = frozenset("""
miss misses missed fall falls fell drop drops dropped plunge plunges plunged slump slumps slumped cut
cuts weak weaker weakness lawsuit sues sued probe fine fined recall recalls loss losses decline declines
declined warn warns warning investigation antitrust delay delays delayed lower lowers lowered layoffs
bearish underperform fraud downgrade downgrades downgraded slowdown slows slowing sink sinks sank
tumble tumbles tumbled concern concerns worries worry disappointing disappoints shortfall halt halts
recession crisis default defect defects outage glitch resigns resignation scandal violation violations
""".split())
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
    age_days = max(0.0, (as_of_day - published) / _DAY)
    return math.pow(0.5, age_days / HALF_LIFE_DAYS)


def is_near_duplicate(a: str, b: str, a_tokens: set[str], b_tokens: set[str]) -> bool:
    if a == b:
        return True
    union = a_tokens | b_tokens
    if union and len(a_tokens & b_tokens) / len(union) >= JACCARD_DUP:
        return True
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= DIFFLIB_DUP


def _r(x: float) -> float:
    return round(x, 4)


def news_features(headlines: list[dict], as_of: DateLike, profile: str | MarketProfile | None = None) -> NewsFeatures:
    """Features of the headlines known before the close of `as_of` in the market `profile` (default US)."""
    day = parse_date(as_of)
    shown = []
    for n, h in enumerate(headlines):
        try:
            stamp = parse_stamp(h["published_at"])
            ts, known = stamp.ts, visible(stamp, day, profile)
        except (KeyError, TypeError, ValueError):
            raise DataError(f"headline {n}: missing or unparseable published_at") from None
        if known:
            shown.append((ts, h))
    # Chronological: the first report of a story is kept, later repeats are dropped.
    shown.sort(key=lambda p: (p[0], str(p[1].get("headline", ""))))
    kept: list[tuple[pd.Timestamp, dict, str]] = []
    kept_keys: list[tuple[str, set[str]]] = []
    duplicates = 0
    for ts, h in shown:
        text = neutralise(str(h.get("headline", "")))[:MAX_HEADLINE]
        if not text:
            continue  # nothing left to show after neutralising
        norm = normalise_text(text)
        toks = set(norm.split())
        if any(is_near_duplicate(norm, kn, toks, kt) for kn, kt in kept_keys):
            duplicates += 1
            continue
        kept.append((ts, h, text))
        kept_keys.append((norm, toks))

    items: list[NewsItemFeature] = []
    weighted = total_w = 0.0
    for ts, h, text in kept:
        w = recency_weight(ts, day)
        s = lexicon_sentiment(text)
        weighted += w * s
        total_w += w
        items.append(NewsItemFeature(
            published_at=str(h["published_at"]),
            headline=text,
            source=neutralise(str(h.get("source") or "unknown"))[:200] or "unknown",
            event_class=event_class(text),
            recency_weight=_r(w),
            sentiment=_r(s),
        ))
    items.reverse()  # newest first: prompts show the freshest evidence at the top
    net = _r(weighted / total_w) if total_w > 0 else 0.0
    return NewsFeatures(
        items=items[:MAX_ITEMS],
        unique_count=len(kept),
        duplicates_removed=duplicates,
        net_sentiment=max(-1.0, min(1.0, net)),
    )
