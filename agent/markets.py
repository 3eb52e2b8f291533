"""Market profiles: the execution rules that differ between markets (seed 002)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class MarketProfile:
    name: str
    fractional: bool
    lot_size: int
    t_plus_one: bool
    price_limit_pct: Optional[float]
    trades_weekends: bool


PROFILES: dict[str, MarketProfile] = {
    "us_equity": MarketProfile("us_equity", fractional=False, lot_size=1, t_plus_one=False, price_limit_pct=None,
                               trades_weekends=False),
    "cn_a_share": MarketProfile("cn_a_share", fractional=False, lot_size=100, t_plus_one=True, price_limit_pct=10.0,
                                trades_weekends=False),
    "crypto": MarketProfile("crypto", fractional=True, lot_size=1, t_plus_one=False, price_limit_pct=None,
                            trades_weekends=True),
}


def get_profile(name: str) -> MarketProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown market profile {name!r} (known: {', '.join(PROFILES)})") from None
