"""Numbers and times as a person reads them: the CLI's format specs (graph/transports/cli/render.py, sessions.py),
one function each, registered as Jinja filters; times in the market's zone (New York) with UTC for the title."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Optional
from zoneinfo import ZoneInfo

from agent.pricing import dollars
from graph.transports.cli.sessions import _size

MARKET_ZONE = ZoneInfo("America/New_York")
NONE = "—"


def signed(v: Optional[float], digits: int = 2) -> str:
    """A stance, a P&L: `+0.25`, `-1,234.50` (render.py's `:+.2f`, sessions.py's `:+,.2f`)."""
    return NONE if v is None else f"{v:+,.{digits}f}"


def fixed(v: Optional[float], digits: int = 2) -> str:
    """A confidence or conviction `0.61`, money `18,023.75`."""
    return NONE if v is None else f"{v:,.{digits}f}"


def general(v: Optional[float]) -> str:
    """A risk check's value or limit, a quantity, an indicator (render.py's `:g`)."""
    return NONE if v is None else f"{v:g}"


def price(v: Optional[float]) -> str:
    """A fill price (render.py's `:.4f`)."""
    return NONE if v is None else f"{v:.4f}"


def percent(v: Optional[float]) -> str:
    """A share of 1 as a whole percentage (render.py's opposition `:.0%`)."""
    return NONE if v is None else f"{v:.0%}"


def count(v: Optional[int]) -> str:
    return NONE if v is None else f"{v:,}"


def money_spent(spend: Optional[dict[str, Any]]) -> str:
    """Dollars as the CLI prints them: never $0 for a call without a price."""
    return NONE if not spend else dollars(spend)


def _moment(ts: Optional[float | str]) -> Optional[datetime]:
    if ts is None or ts == "":
        return None
    if isinstance(ts, str):
        try:
            moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(ts), UTC)


def market_time(ts: Optional[float | str]) -> str:
    """`2026-11-27 22:21 EST`: the market's clock, which is what a trader reads a session by."""
    moment = _moment(ts)
    return NONE if moment is None else moment.astimezone(MARKET_ZONE).strftime("%Y-%m-%d %H:%M %Z")


def utc_time(ts: Optional[float | str]) -> str:
    """The same moment in UTC, for the title attribute (shown on hover)."""
    moment = _moment(ts)
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return NONE
    seconds = int(seconds)
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds >= 60 else f"{seconds} s"


FILTERS: dict[str, Callable[..., str]] = {
    "signed": signed,
    "fixed": fixed,
    "general": general,
    "price": price,
    "percent": percent,
    "count": count,
    "dollars": money_spent,
    "market_time": market_time,
    "utc_time": utc_time,
    "size": _size,
    "duration": duration,
}
