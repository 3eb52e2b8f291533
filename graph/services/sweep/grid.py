"""A sweep's grid expanded into episodes: configurations (universe × memory mode × model × override set) crossed
with windows. The order is fixed (configurations outer, windows inner), so the same grid always gives the same
episode ids and a resumed sweep finds its episodes again.

Windows are counted in sessions of the market's trading calendar, so `length = 63` is a quarter of trading
whether or not it spans a holiday:
- rolling: windows of `length` sessions, a new one every `step` sessions (they overlap when step < length);
- walk_forward: after `train` sessions in sample, out-of-sample windows of `test` sessions back to back; each
  window names its in-sample span, which an LLM agent does not fit on but a user tunes the grid on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from agent.input_window import TRADEGRAPH, InputWindow
from agent.markets import DecideAt, trading_days
from schemas.simulation import Market, MemoryMode

# the settings an override set may change: the episode's own, and the risk engine's limits (agent/risk_limits.toml)
EPISODE_KEYS = ("capital", "fees_bps", "slippage_bps", "market", "every", "decide_at")
RISK_KEYS = ("risk_per_trade_pct", "daily_loss_cap_pct", "max_notional_pct", "max_positions", "exposure_cap_pct")


class GridError(ValueError):
    """A grid that cannot be expanded; the message names the value."""


@dataclass(frozen=True)
class Window:
    start: str
    end: str
    label: str
    in_sample: Optional[tuple[str, str]] = None


@dataclass(frozen=True)
class Episode:
    """One backtest of the sweep: everything run_episode needs, and the labels the aggregate groups by."""

    episode_id: str
    index: int
    config_key: str  # the configuration: same key = same settings, different windows
    symbols: tuple[str, ...]
    window: Window
    memory: MemoryMode
    quick_model: Optional[str]
    deep_model: Optional[str]
    capital: float
    fees_bps: float
    slippage_bps: float
    market: Market
    every: int
    risk: dict[str, Any] = field(default_factory=dict)  # RiskLimits' fields: counts and percentages
    override_label: Optional[str] = None
    # when each decision point decides (schemas.simulation.EpisodeConfig.decide_at): at the close, or at the open
    # (StockBench). Left out of as_dict while it is the default, so the grid hash of every sweep written before it
    # existed is unchanged and such a sweep resumes its own episodes
    decide_at: DecideAt = "close"
    # the sampling temperature of its provider tiers (AgentConfig.temperature): None is tradegraph's 0. StockBench
    # runs a real model at its protocol's 0.7; left out of as_dict while None, as decide_at is
    temperature: Optional[float] = None
    # how much news and past its cycles are shown (agent/input_window.py): tradegraph's, or StockBench's on a
    # StockBench run; left out of as_dict while it is tradegraph's, as decide_at is
    input_window: InputWindow = TRADEGRAPH

    def as_dict(self) -> dict[str, Any]:
        return {
            **({"decide_at": self.decide_at} if self.decide_at != "close" else {}),
            **({"temperature": self.temperature} if self.temperature is not None else {}),
            **({"input_window": dataclasses.asdict(self.input_window)} if self.input_window != TRADEGRAPH else {}),
            "episode_id": self.episode_id,
            "index": self.index,
            "config_key": self.config_key,
            "symbols": list(self.symbols),
            "start": self.window.start,
            "end": self.window.end,
            "window": self.window.label,
            "in_sample": list(self.window.in_sample) if self.window.in_sample else None,
            "memory": self.memory,
            "quick_model": self.quick_model,
            "deep_model": self.deep_model,
            "capital": self.capital,
            "fees_bps": self.fees_bps,
            "slippage_bps": self.slippage_bps,
            "market": self.market,
            "every": self.every,
            "risk": dict(self.risk),
            "override": self.override_label,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        w = Window(d["start"], d["end"], d["window"], tuple(d["in_sample"]) if d.get("in_sample") else None)
        return cls(
            episode_id=d["episode_id"],
            index=d["index"],
            config_key=d["config_key"],
            symbols=tuple(d["symbols"]),
            window=w,
            memory=d["memory"],
            quick_model=d.get("quick_model"),
            deep_model=d.get("deep_model"),
            capital=d["capital"],
            fees_bps=d["fees_bps"],
            slippage_bps=d["slippage_bps"],
            market=d["market"],
            every=d["every"],
            risk=dict(d.get("risk") or {}),
            override_label=d.get("override"),
            decide_at=d.get("decide_at", "close"),
            temperature=d.get("temperature"),
            input_window=InputWindow.from_dict(d["input_window"]) if d.get("input_window") else TRADEGRAPH,
        )


# ------------------------------------------------------------------------------------------------ windows
def _sessions(market: str, start: str, end: str) -> list[str]:
    days = [d.strftime("%Y-%m-%d") for d in trading_days(market, start, end)]
    if not days:
        raise GridError(f"no trading session of {market} in {start}..{end}")
    return days


def rolling_windows(market: str, start: str, end: str, length: int, step: int) -> list[Window]:
    days = _sessions(market, start, end)
    if length > len(days):
        raise GridError(f"rolling window length {length} is longer than {start}..{end} ({len(days)} sessions)")
    return [
        Window(days[i], days[i + length - 1], f"{days[i]}..{days[i + length - 1]}")
        for i in range(0, len(days) - length + 1, step)
    ]


def walk_forward_windows(market: str, start: str, end: str, train: int, test: int) -> list[Window]:
    days = _sessions(market, start, end)
    if train + test > len(days):
        raise GridError(
            f"walk-forward train {train} + test {test} sessions do not fit {start}..{end} ({len(days)} sessions)"
        )
    out = []
    for i in range(train, len(days) - test + 1, test):
        out.append(
            Window(
                days[i],
                days[i + test - 1],
                f"{days[i]}..{days[i + test - 1]}",
                in_sample=(days[i - train], days[i - 1]),
            )
        )
    return out


def windows_of(spec: Any, market: str) -> list[Window]:
    """spec: the grid's `windows` (kind list | rolling | walk_forward), as attributes or a dict."""
    get: Callable[..., Any] = spec.get if isinstance(spec, dict) else (lambda k, d=None: getattr(spec, k, d))
    kind = get("kind")
    if kind == "list":
        out = []
        for pair in get("spans") or []:
            start, end = pair
            if start > end:
                raise GridError(f"window {start}..{end} ends before it starts")
            out.append(Window(start, end, f"{start}..{end}"))
        if not out:
            raise GridError("windows: kind list needs at least one [start, end] span")
        return out
    if kind == "rolling":
        return rolling_windows(market, get("start"), get("end"), int(get("length")), int(get("step")))
    if kind == "walk_forward":
        return walk_forward_windows(market, get("start"), get("end"), int(get("train")), int(get("test")))
    raise GridError(f"unknown window kind {kind!r} (list, rolling, walk_forward)")


# ------------------------------------------------------------------------------------------------ the grid
def _override_sets(overrides: list[Any]) -> list[tuple[Optional[str], dict[str, Any]]]:
    if not overrides:
        return [(None, {})]
    out = []
    for i, o in enumerate(overrides):
        values = dict(o) if isinstance(o, dict) else o.model_dump(exclude_none=True)
        label = values.pop("label", None) or f"o{i}"
        unknown = set(values) - set(EPISODE_KEYS) - set(RISK_KEYS)
        if unknown:
            raise GridError(
                f"override {label!r}: unknown setting(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(EPISODE_KEYS + RISK_KEYS)})"
            )
        out.append((label, values))
    labels = [lb for lb, _ in out]
    if len(set(labels)) != len(labels):
        raise GridError(f"override labels repeat: {', '.join(labels)}")
    return out


def config_key(
    symbols: tuple[str, ...], memory: str, quick: Optional[str], deep: Optional[str], override: Optional[str]
) -> str:
    model = (
        "configured"
        if quick is None and deep is None
        else (quick if quick == deep or deep is None else f"{quick}/{deep}")
    )
    parts = ["+".join(symbols), f"memory={memory}", f"model={model}"]
    if override:
        parts.append(override)
    return " ".join(parts)


def expand(grid: Any, sweep_id: str) -> list[Episode]:
    """Every episode of the grid (a kernel SweepInput or anything with its attributes)."""
    models = [(m.quick, m.deep or m.quick) for m in (grid.models or [])] or [(None, None)]
    episodes: list[Episode] = []
    for symbols in grid.universes:
        syms = tuple(s.strip().upper() for s in symbols)
        if len(set(syms)) != len(syms):
            raise GridError(f"universe {','.join(syms)} names a symbol twice")
        for memory in grid.memory:
            for quick, deep in models:
                for label, values in _override_sets(grid.overrides or []):
                    market = values.get("market", grid.market)
                    key = config_key(syms, memory, quick, deep, label)
                    for window in windows_of(grid.windows, market):
                        episodes.append(
                            Episode(
                                episode_id=f"{sweep_id}-e{len(episodes):03d}",
                                index=len(episodes),
                                config_key=key,
                                symbols=syms,
                                window=window,
                                memory=memory,
                                quick_model=quick,
                                deep_model=deep,
                                capital=float(values.get("capital", grid.capital)),
                                fees_bps=float(values.get("fees_bps", grid.fees_bps)),
                                slippage_bps=float(values.get("slippage_bps", grid.slippage_bps)),
                                market=market,
                                every=int(values.get("every", grid.every)),
                                risk={k: values[k] for k in RISK_KEYS if k in values},
                                override_label=label,
                                decide_at=values.get("decide_at", getattr(grid, "decide_at", "close")),
                            )
                        )
    if len({(e.config_key, e.window) for e in episodes}) != len(episodes):
        raise GridError("the grid names the same configuration twice (a repeated universe, memory mode or model)")
    return episodes


def grid_hash(episodes: list[Episode]) -> str:
    """What a resumed sweep must match: the episodes, not the way the grid was written."""
    text = json.dumps([e.as_dict() for e in episodes], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
