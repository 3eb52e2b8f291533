"""Market profiles: the execution rules, trading calendar and daily open and close that differ between markets
(seed 002), and the one rule of what a decision may know.

A profile decides at the close (the default) or at the open (`decide_at`, StockBench's protocol):
- at the close, a cycle dated `day` decides on that day's complete bar and fills at its close;
- at the open, it knows every bar through the previous session and that day's opening price, the price its
  orders fill at, and nothing else of the day.
Anything published at or after the decision time (news, a filing) is not yet known. This module is the one
place those rules live: news and fundamentals ask `visible`, bars ask `bar_cutoff`, fills ask `fill_field`.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import NamedTuple, Optional, cast

import pandas as pd

DEFAULT_MARKET = "us_equity"
# exchange_calendars only builds the range it is asked for; this covers any plausible data set
_CALENDAR_START = "1991-01-02"
_AFTER = pd.Timedelta(microseconds=1)


from agent.decision_time import DECIDE_AT, DecideAt  # noqa: E402 - defined once, light to import


@dataclass(frozen=True)
class MarketProfile:
    name: str
    fractional: bool
    lot_size: int
    t_plus_one: bool
    price_limit_pct: Optional[float]
    trades_weekends: bool
    timezone: str
    # the regular daily close, as local time since midnight (24h = the end of the day)
    close: timedelta
    # exchange_calendars code (holidays, early closes); None = every day is a session
    calendar: Optional[str] = None
    # the regular daily open, as local time since midnight (used where the calendar lists no session)
    open: timedelta = timedelta(0)
    # when a cycle dated `day` decides: at that day's close (on its complete bar) or at its open
    decide_at: DecideAt = "close"


PROFILES: dict[str, MarketProfile] = {
    "us_equity": MarketProfile(
        "us_equity",
        fractional=False,
        lot_size=1,
        t_plus_one=False,
        price_limit_pct=None,
        trades_weekends=False,
        timezone="America/New_York",
        close=timedelta(hours=16),
        calendar="XNYS",
        open=timedelta(hours=9, minutes=30),
    ),
    "cn_a_share": MarketProfile(
        "cn_a_share",
        fractional=False,
        lot_size=100,
        t_plus_one=True,
        price_limit_pct=10.0,
        trades_weekends=False,
        timezone="Asia/Shanghai",
        close=timedelta(hours=15),
        calendar="XSHG",
        open=timedelta(hours=9, minutes=30),
    ),
    # a crypto daily bar closes at 00:00 UTC: the decision is taken at the end of the UTC day
    "crypto": MarketProfile(
        "crypto",
        fractional=True,
        lot_size=1,
        t_plus_one=False,
        price_limit_pct=None,
        trades_weekends=True,
        timezone="UTC",
        close=timedelta(hours=24),
    ),
}


def get_profile(name: str | MarketProfile | None, decide_at: Optional[str] = None) -> MarketProfile:
    """The named profile (or the one given), deciding at `decide_at` when that is given."""
    if isinstance(name, MarketProfile):
        p = name
    else:
        try:
            p = PROFILES[name or DEFAULT_MARKET]
        except KeyError:
            raise ValueError(f"unknown market profile {name!r} (known: {', '.join(PROFILES)})") from None
    if decide_at is None or decide_at == p.decide_at:
        return p
    if decide_at not in DECIDE_AT:
        raise ValueError(f"unknown decision time {decide_at!r} (known: {', '.join(DECIDE_AT)})")
    return replace(p, decide_at=cast(DecideAt, decide_at))  # one of DECIDE_AT, checked above


class CalendarRangeError(ValueError):
    """A date the market's calendar does not cover: whether it trades is unknown, so it is refused."""


@functools.cache
def _calendar(code: str):
    import exchange_calendars  # ~1 s to import: only commands that check a date pay for it

    with warnings.catch_warnings():
        # its constructor reads Series.values, which pandas 3.1 deprecates: noise for every caller, not ours to fix
        warnings.filterwarnings("ignore", message="Series.values returning")
        return exchange_calendars.get_calendar(code, start=_CALENDAR_START)


@functools.cache
def _session_bounds(code: str, column: str) -> dict[pd.Timestamp, pd.Timestamp]:
    """Every session of the calendar mapped to its open or close as naive UTC: one dict lookup per decision."""
    times = _calendar(code).schedule[column].dt.tz_convert("UTC").dt.tz_localize(None)
    return dict(zip(times.index, times))


def _day(value: str | date | datetime | pd.Timestamp) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return (ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts).normalize()


def _in_range(cal, day: pd.Timestamp) -> bool:
    return cal.first_session <= day <= cal.last_session


def is_trading_day(profile: str | MarketProfile, day) -> bool:
    p = get_profile(profile)
    d = _day(day)
    if p.calendar is None:
        return True
    cal = _calendar(p.calendar)
    if not _in_range(cal, d):
        raise CalendarRangeError(
            f"{d.date()} is outside the {p.name} calendar ({p.calendar}: "
            f"{cal.first_session.date()}..{cal.last_session.date()})"
        )
    return bool(cal.is_session(d))


def nearest_trading_days(profile: str | MarketProfile, day) -> tuple[Optional[pd.Timestamp], Optional[pd.Timestamp]]:
    """The last trading day strictly before `day` and the first strictly after (None past the calendar's ends)."""
    p = get_profile(profile)
    d = _day(day)
    if p.calendar is None:
        return d - pd.Timedelta(days=1), d + pd.Timedelta(days=1)
    cal = _calendar(p.calendar)
    before = d - pd.Timedelta(days=1)
    after = d + pd.Timedelta(days=1)
    prev = cal.date_to_session(before, "previous") if _in_range(cal, before) else None
    nxt = cal.date_to_session(after, "next") if _in_range(cal, after) else None
    return prev, nxt


def trading_days(profile: str | MarketProfile, start, end) -> list[pd.Timestamp]:
    """Sessions in [start, end]: the decision points a backtest may use for this market."""
    p = get_profile(profile)
    lo, hi = _day(start), _day(end)
    if p.calendar is None:
        return list(pd.date_range(lo, hi, freq="D"))
    cal = _calendar(p.calendar)
    for d in (lo, hi):
        if not _in_range(cal, d):
            is_trading_day(p, d)  # raises the range error with its message
    return list(cal.sessions_in_range(lo, hi))


@functools.lru_cache(maxsize=65536)
def session_close(profile: str | MarketProfile | None, day) -> pd.Timestamp:
    """The close of `day` in this market, as naive UTC. Early closes (e.g. 13:00 on 2012-07-03) come from
    the calendar; a day it does not list as a session gets the regular close."""
    return _session_time(get_profile(profile), _day(day), "close")


@functools.lru_cache(maxsize=65536)
def session_open(profile: str | MarketProfile | None, day) -> pd.Timestamp:
    """The open of `day` in this market, as naive UTC (the calendar's, else the regular open)."""
    return _session_time(get_profile(profile), _day(day), "open")


def _session_time(p: MarketProfile, d: pd.Timestamp, column: str) -> pd.Timestamp:
    t = _session_bounds(p.calendar, column).get(d) if p.calendar is not None else None
    if t is not None:
        return t
    local = p.close if column == "close" else p.open
    return (d + local).tz_localize(p.timezone).tz_convert("UTC").tz_localize(None)


def decision_time(profile: str | MarketProfile | None, day) -> pd.Timestamp:
    """When a cycle dated `day` decides, as naive UTC: that day's close, or its open for a profile deciding at
    the open. Everything published strictly before it is known; nothing at or after it."""
    p = get_profile(profile)
    return session_open(p, day) if p.decide_at == "open" else session_close(p, day)


def bar_cutoff(profile: str | MarketProfile | None, day) -> pd.Timestamp:
    """The last date whose bar a decision on `day` may read whole: `day` itself at the close (its bar is
    complete at the decision), the day before at the open (a bar is complete only at its close). Pass it to
    `MarketData.as_of`: every bar dated on or before it, none after."""
    d = _day(day)
    return d if get_profile(profile).decide_at == "close" else d - pd.Timedelta(days=1)


def fill_field(profile: str | MarketProfile | None) -> str:
    """The bar field a decision on `day` fills and marks at: that day's close, or its open."""
    return get_profile(profile).decide_at


class Stamp(NamedTuple):
    """A parsed publication stamp: the instant as naive UTC (a date alone: its midnight) and whether only a
    date was given. Parse once per item; `visible` then costs one comparison."""

    ts: pd.Timestamp
    date_only: bool


def parse_stamp(value: object) -> Stamp:
    """A date or ISO datetime (no zone = UTC); a date alone is any spelling with no time of day in it."""
    if isinstance(value, Stamp):
        return value
    if isinstance(value, date) and not isinstance(value, datetime):
        return Stamp(pd.Timestamp(value), True)
    text = value.isoformat() if isinstance(value, datetime) else str(value).strip()
    ts = pd.Timestamp(text)
    if pd.isna(ts):
        raise ValueError(f"unparseable timestamp {value!r}")
    date_only = ":" not in text and ts == ts.normalize()
    if ts.tzinfo is not None:
        ts = ts.tz_localize(None) if date_only else ts.tz_convert("UTC").tz_localize(None)
    return Stamp(ts, date_only)


def published_time(value: object, profile: str | MarketProfile | None) -> pd.Timestamp:
    """When an item became known, as naive UTC. A date alone says nothing about the hour, so it counts as
    published after that day's close (whenever the profile decides): known from the next session on."""
    stamp = parse_stamp(value)
    return session_close(profile, stamp.ts) + _AFTER if stamp.date_only else stamp.ts


def visible(value: object, day, profile: str | MarketProfile | None) -> bool:
    """True when an item stamped `value` (raw or a Stamp) was public strictly before the decision on `day`."""
    return published_time(value, profile) < decision_time(profile, day)
