"""The mandate: what a broker cycle may do whatever the model decided, checked by code in VALIDATING and again
right before the first submit. A TOML file (TRADEGRAPH_MANDATE names it; its sha256 goes in the run manifest):

    symbols = ["AAPL", "MSFT"]      # the allow-list; [] or absent: any symbol of the cycle's universe
    max_order_notional = 10000      # dollars, one order
    max_position_notional = 25000   # dollars, one symbol's position after the cycle
    max_gross_exposure = 100000     # dollars, all positions after the cycle, long and short alike
    max_orders_per_day = 40         # orders submitted per New York trading day, across sessions
    trading_hours = "09:30-16:00"   # New York time; no submit outside
    approval_required = true        # every broker cycle pauses at pending_approval

A refusal names its rule, limit and value; a key the mandate does not know is refused, never ignored.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, time
from pathlib import Path
from typing import Any, Optional
from zoneinfo import ZoneInfo

from agent.brokers import BrokerConfigError

NEW_YORK = ZoneInfo("America/New_York")


@dataclass(frozen=True)
class Refusal:
    rule: str
    limit: Any
    value: Any
    symbol: Optional[str] = None

    @property
    def message(self) -> str:
        on = f" ({self.symbol})" if self.symbol else ""
        return f"mandate {self.rule}{on}: {self.value} against a limit of {self.limit}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}

    def failed_check(self, schema: str, check: str) -> dict[str, Any]:
        """The payload of the `validation` event that records this refusal (VALIDATING's and the pre-submit's)."""
        return {
            "schema": schema,
            "check": check,
            "ok": False,
            "rule": self.rule,
            "limit": self.limit,
            "value": self.value,
            "symbol": self.symbol,
            "error": self.message,
        }


@dataclass(frozen=True)
class Mandate:
    symbols: tuple[str, ...] = ()
    max_order_notional: float = 10_000.0
    max_position_notional: float = 25_000.0
    max_gross_exposure: float = 100_000.0
    max_orders_per_day: int = 40
    trading_hours: str = "09:30-16:00"
    approval_required: bool = True
    path: Optional[str] = None
    sha256: str = field(default="built-in", compare=False)

    def hours(self) -> tuple[time, time]:
        start, _, end = self.trading_hours.partition("-")
        return time.fromisoformat(start.strip()), time.fromisoformat(end.strip())

    def identity(self) -> dict[str, Any]:
        """What the run manifest records."""
        return {
            "path": self.path,
            "sha256": self.sha256,
            **{k: v for k, v in asdict(self).items() if k not in ("path", "sha256")},
        }

    def check(
        self,
        orders: Sequence[tuple[str, str, float]],
        prices: Mapping[str, float],
        positions: Mapping[str, float],
        *,
        orders_today: int,
        now: datetime,
    ) -> list[Refusal]:
        """`orders`: (symbol, BUY|SELL, quantity); `positions`: symbol -> signed quantity held now; `prices` value
        both. Every rule is checked (all refusals are reported, not the first)."""
        out: list[Refusal] = []
        if self.symbols:
            out += [Refusal("symbols", list(self.symbols), s, s) for s, _, _ in orders if s not in self.symbols]
        after = dict(positions)
        for s, side, qty in orders:
            px = prices.get(s)
            if px is None:
                out.append(Refusal("price_known", "a price for every order", None, s))
                continue
            notional = round(qty * px, 2)
            if notional > self.max_order_notional:
                out.append(Refusal("max_order_notional", self.max_order_notional, notional, s))
            after[s] = after.get(s, 0.0) + (qty if side == "BUY" else -qty)
        for s in {o[0] for o in orders}:
            value = round(abs(after.get(s, 0.0)) * prices.get(s, 0.0), 2)
            if value > self.max_position_notional:
                out.append(Refusal("max_position_notional", self.max_position_notional, value, s))
        gross = round(sum(abs(q) * prices.get(s, 0.0) for s, q in after.items()), 2)
        if gross > self.max_gross_exposure:
            out.append(Refusal("max_gross_exposure", self.max_gross_exposure, gross))
        if orders and orders_today + len(orders) > self.max_orders_per_day:
            out.append(Refusal("max_orders_per_day", self.max_orders_per_day, orders_today + len(orders)))
        local = now.astimezone(NEW_YORK)
        start, end = self.hours()
        if orders and not (start <= local.time() <= end):
            out.append(Refusal("trading_hours", self.trading_hours, local.strftime("%H:%M %Z")))
        return out


_FIELDS = {
    "symbols",
    "max_order_notional",
    "max_position_notional",
    "max_gross_exposure",
    "max_orders_per_day",
    "trading_hours",
    "approval_required",
}


def load_mandate(path: Optional[str]) -> Mandate:
    """The mandate at `path`, or the built-in one; a bad file is BrokerConfigError naming the key and value."""
    if not path:
        return Mandate()
    p = Path(path)
    try:
        raw = p.read_bytes()
        data = tomllib.loads(raw.decode())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BrokerConfigError(f"TRADEGRAPH_MANDATE={path!r}: {e}") from None
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise BrokerConfigError(
            f"TRADEGRAPH_MANDATE={path!r}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_FIELDS))})"
        )
    kw: dict[str, Any] = {}
    for key, value in data.items():
        if key == "symbols":
            if not isinstance(value, list) or not all(isinstance(s, str) and s.strip() for s in value):
                raise BrokerConfigError(f"mandate symbols={value!r}: expected a list of tickers")
            kw[key] = tuple(s.strip().upper() for s in value)
        elif key == "approval_required":
            if not isinstance(value, bool):
                raise BrokerConfigError(f"mandate approval_required={value!r}: expected true or false")
            kw[key] = value
        elif key == "trading_hours":
            kw[key] = str(value)
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise BrokerConfigError(f"mandate {key}={value!r}: expected a number above 0")
            kw[key] = int(value) if key == "max_orders_per_day" else float(value)
    mandate = Mandate(**kw, path=str(p.resolve()), sha256=hashlib.sha256(raw).hexdigest())
    try:
        start, end = mandate.hours()
    except ValueError:
        raise BrokerConfigError(f"mandate trading_hours={mandate.trading_hours!r}: expected HH:MM-HH:MM") from None
    if start >= end:
        raise BrokerConfigError(f"mandate trading_hours={mandate.trading_hours!r}: the start is not before the end")
    return mandate
