"""What each LLM call cost: its usage (input, output, cached and reasoning tokens) and its price in dollars.

Prices come from agent/prices.toml, with the entries of the file TRADEGRAPH_PRICES names read over them. A model
the table does not know is priced None ("unknown"), never $0. A provider that reports no usage is counted with an
estimate, marked `estimated`: ~4 characters per token (agent/offline_model.py `estimate_tokens`), because
tiktoken's o200k_base encoding is downloaded on first use and tradegraph must work offline.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

DEFAULT_PRICES = Path(__file__).with_name("prices.toml")
PRICES_VAR = "TRADEGRAPH_PRICES"
_RATES = ("input", "cached_input", "output")


class PriceTableError(ValueError):
    pass


@dataclass(frozen=True)
class Price:
    """US dollars per 1M tokens."""

    input: float
    cached_input: float
    output: float


def _read(path: Path) -> dict[str, Price]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PriceTableError(f"{path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise PriceTableError(f"{path}: not TOML ({e})") from None
    table = {}
    for name, entry in (data.get("models") or {}).items():
        if not isinstance(entry, dict) or set(entry) != set(_RATES):
            raise PriceTableError(f"{path}: [models.{name!r}] must have exactly {', '.join(_RATES)}")
        for k in _RATES:
            v = entry[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e6:
                raise PriceTableError(f"{path}: [models.{name!r}] {k} = {v!r} is not a price (dollars per 1M tokens)")
        table[name] = Price(**{k: float(entry[k]) for k in _RATES})
    return table


@functools.lru_cache(maxsize=8)
def _load(path: Optional[str], mtime: Optional[float]) -> dict[str, Price]:
    table = _read(DEFAULT_PRICES)
    if path is not None:
        table.update(_read(Path(path)))
    return table


def price_table(env_path: Optional[str] = None) -> dict[str, Price]:
    """The default table with the user's file (TRADEGRAPH_PRICES) over it; re-read when the file changes."""
    path = env_path if env_path is not None else (os.environ.get(PRICES_VAR) or None)
    try:
        mtime = Path(path).stat().st_mtime if path else None
    except OSError:
        mtime = None
    return _load(path, mtime)


def check_prices_env(env) -> None:
    path = env.get(PRICES_VAR)
    if path:
        try:
            price_table(path)
        except PriceTableError as e:
            raise ValueError(f"{PRICES_VAR}={path!r}: {e}") from None


def price_of(model: Optional[str], table: Optional[dict[str, Price]] = None) -> tuple[Optional[str], Optional[Price]]:
    """(the table's name for it, its price), or (None, None) when unknown."""
    if not model:
        return None, None
    table = price_table() if table is None else table
    name = model.split(":", 1)[-1].rsplit("/", 1)[-1]  # provider:model, models/gemini-…
    if name in table:
        return name, table[name]
    extended = [k for k in table if name.startswith(k + "-")]
    if extended:
        best = max(extended, key=len)
        return best, table[best]
    return None, None


def usage_of(message: Any, request: Iterable[Any] = ()) -> dict[str, Any]:
    """A call's usage from LangChain's usage_metadata; estimated from the text when the provider reported none."""
    um = dict(getattr(message, "usage_metadata", None) or {})
    if um.get("input_tokens") or um.get("output_tokens"):
        ins, outs = int(um.get("input_tokens") or 0), int(um.get("output_tokens") or 0)
        return {
            **um,
            "input_tokens": ins,
            "output_tokens": outs,
            "total_tokens": int(um.get("total_tokens") or ins + outs),
            "cached_tokens": int((um.get("input_token_details") or {}).get("cache_read") or 0),
            "reasoning_tokens": int((um.get("output_token_details") or {}).get("reasoning") or 0),
            "estimated": False,
        }
    # the offline model's own estimate, one rule; imported here, since it loads LangChain (every command's start-up
    # check reads this module's price table)
    from agent.offline_model import _message_text as message_text
    from agent.offline_model import estimate_tokens

    ins = sum(estimate_tokens(message_text(m)) for m in request)
    outs = estimate_tokens(message_text(message)) if message is not None else 0
    return {
        "input_tokens": ins,
        "output_tokens": outs,
        "total_tokens": ins + outs,
        "cached_tokens": 0,
        "reasoning_tokens": 0,
        "estimated": True,
    }


def cost_of(usage: dict[str, Any], price: Optional[Price]) -> Optional[float]:
    """Dollars, or None when the price is unknown. Reasoning tokens are inside output_tokens (as billed)."""
    if price is None:
        return None
    cached = min(int(usage.get("cached_tokens") or 0), int(usage.get("input_tokens") or 0))
    return round(
        (
            (int(usage.get("input_tokens") or 0) - cached) * price.input
            + cached * price.cached_input
            + int(usage.get("output_tokens") or 0) * price.output
        )
        / 1e6,
        8,
    )


def call_cost(
    message: Any, request: Iterable[Any], model: Optional[str]
) -> tuple[dict, Optional[float], Optional[str]]:
    """(usage, dollars or None, the price-table name it was priced as) of one answered call. The model the answer
    names (a dated snapshot) wins over the one asked for."""
    usage = usage_of(message, request)
    answered = ((getattr(message, "response_metadata", None) or {}).get("model_name")) or model
    priced_as, price = price_of(answered)
    if price is None and answered != model:
        priced_as, price = price_of(model)
    return usage, cost_of(usage, price), priced_as


_COUNTS = (
    "calls",
    "cached_calls",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "total_tokens",
    "estimated_calls",
    "unknown_cost_calls",
)


@dataclass
class Spend:
    """Tokens and dollars added up: by state for a cycle, over cycles for a backtest. `usd` is what the known prices
    add up to; `unknown_cost_calls` says how many calls it leaves out (a model without a price)."""

    totals: dict[str, Any] = field(default_factory=lambda: {**{k: 0 for k in _COUNTS}, "usd": 0.0})
    by_state: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, state: str, usage: dict, cost: Optional[float], *, cached: bool = False) -> None:
        for bucket in (self.totals, self.by_state.setdefault(state, {**{k: 0 for k in _COUNTS}, "usd": 0.0})):
            bucket["cached_calls" if cached else "calls"] += 1
            for k in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "total_tokens"):
                bucket[k] += int(usage.get(k) or 0)
            bucket["estimated_calls"] += bool(usage.get("estimated"))
            if cost is None:
                bucket["unknown_cost_calls"] += 1
            else:
                bucket["usd"] = round(bucket["usd"] + cost, 8)

    def as_dict(self) -> dict[str, Any]:
        return {**self.totals, "by_state": {s: dict(v) for s, v in self.by_state.items()}}

    @classmethod
    def merge(cls, records: Iterable[Optional[dict]]) -> dict[str, Any]:
        """Several as_dict() records added up (a backtest's cycles)."""
        out = cls()
        for rec in records:
            for bucket, src in [(out.totals, rec or {})] + [
                (out.by_state.setdefault(s, {**{k: 0 for k in _COUNTS}, "usd": 0.0}), v)
                for s, v in ((rec or {}).get("by_state") or {}).items()
            ]:
                for k in _COUNTS:
                    bucket[k] += int(src.get(k) or 0)
                bucket["usd"] = round(bucket["usd"] + float(src.get("usd") or 0.0), 8)
        return out.as_dict()


def dollars(spend: dict[str, Any]) -> str:
    """ "$0.0123", "$0.0123 + unknown (2 calls unpriced)" or "unknown": never $0 for what has no price."""
    unknown = int(spend.get("unknown_cost_calls") or 0)
    priced = int(spend.get("calls") or 0) - unknown
    usd = f"${float(spend.get('usd') or 0.0):.4f}"
    if not unknown:
        return usd
    if priced <= 0:
        return "unknown"
    return f"{usd} + unknown ({unknown} call{'s' if unknown != 1 else ''} unpriced)"
