"""StockBench's protocol as tradegraph runs it, and every way tradegraph departs from it.

The defaults are the paper's (arXiv 2510.02209; its repository's scripts/run_benchmark.sh and config.yaml): the
20 DJIA symbols, 2025-03-01..2025-06-30 (83 sessions), 100,000 cash, long-only, decisions at the open with fills
at the open, commission 1 bp and slippage 2 bp. The scorecard prints the departures beside the table, so a
reader never takes tradegraph's row for a run of StockBench's own agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from schemas.simulation import MemoryMode

SYMBOLS: tuple[str, ...] = (
    "GS",
    "MSFT",
    "HD",
    "V",
    "SHW",
    "CAT",
    "MCD",
    "UNH",
    "AXP",
    "AMGN",
    "TRV",
    "CRM",
    "JPM",
    "IBM",
    "HON",
    "BA",
    "AMZN",
    "AAPL",
    "PG",
    "JNJ",
)
START, END = "2025-03-01", "2025-06-30"
INITIAL_CASH = 100_000.0
COMMISSION_BPS = 1.0
SLIPPAGE_BPS = 2.0
# the paper's sampling temperature (arXiv 2510.02209, Table 2: each model the mean of 3 runs at 0.7), which a
# provider's model is sent on a StockBench run; the offline model takes none (it is deterministic)
TEMPERATURE = 0.7
PUBLISHED = Path(__file__).with_name("published.json")


@dataclass(frozen=True)
class Protocol:
    """What one benchmark run decides on; the defaults are StockBench's."""

    symbols: tuple[str, ...] = SYMBOLS
    start: str = START
    end: str = END
    initial_cash: float = INITIAL_CASH
    fees_bps: float = COMMISSION_BPS
    slippage_bps: float = SLIPPAGE_BPS
    memory: MemoryMode = "session"
    # the temperature a provider's model is sent when the user chose one; None: the paper's TEMPERATURE
    temperature: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def model_temperature(self) -> float:
        return TEMPERATURE if self.temperature is None else self.temperature

    def departures(self) -> list[str]:
        """Every way this run departs from the paper's protocol, one plain line each: the settings a user
        changed first, then what tradegraph always does differently."""
        lines = []
        if tuple(self.symbols) != SYMBOLS:
            lines.append(f"symbols: {len(self.symbols)} chosen ({','.join(self.symbols)}), the paper trades its 20")
        if (self.start, self.end) != (START, END):
            lines.append(
                f"window {self.start}..{self.end}, the paper's is {START}..{END}: its published rows are not comparable"
            )
        if self.initial_cash != INITIAL_CASH:
            lines.append(f"starting cash {self.initial_cash:,.0f}, the paper's is {INITIAL_CASH:,.0f}")
        if (self.fees_bps, self.slippage_bps) != (COMMISSION_BPS, SLIPPAGE_BPS):
            lines.append(
                f"costs: commission {self.fees_bps:g} bp, slippage {self.slippage_bps:g} bp; the paper's "
                f"are {COMMISSION_BPS:g} and {SLIPPAGE_BPS:g}"
            )
        if self.memory != "session":
            lines.append(
                f"memory {self.memory}: "
                + (
                    "agents recall notes of every run known before each date"
                    if self.memory == "on"
                    else "agents recall no past notes"
                )
                + " (StockBench shows each symbol's own recent decisions, as "
                "tradegraph's default 'session' recalls the run's own notes)"
            )
        if self.model_temperature != TEMPERATURE:
            lines.append(
                f"temperature {self.model_temperature:g} for a provider's model, the paper's is "
                f"{TEMPERATURE:g} (Table 2: each model the mean of 3 runs at {TEMPERATURE:g})"
            )
        return lines + list(ALWAYS)


# What tradegraph does differently on any run, measured or read in StockBench's engine (docs/stockbench.md).
ALWAYS: tuple[str, ...] = (
    "agent: tradegraph's eight-state machine (analysts, debate, trader, risk engine), not StockBench's two-stage "
    "agent; code sizes every order from ATR-anchored stops and a risk budget, the model never names an amount",
    "orders: whole shares (StockBench: 0.01 share), and a decision fills all or nothing, sells first "
    "(StockBench skips a buy that lacks cash, in universe order)",
    "slippage moves the fill price, so it costs cash (StockBench books it in the cost basis only)",
    "risk limits: per-symbol notional, open positions, risk at the stops and gross exposure are enforced "
    "(StockBench enforces none)",
    "news: by true publication time, visible only before the 09:30 New York open of the decision day "
    "(StockBench reads Finnhub's mislabelled UTC+8 times and, offline, falls back to a window that reaches past "
    "the open on 18 symbol-days of this window)",
    "fundamentals: computed by code from SEC filings visible from their acceptance time (StockBench shows a "
    "vendor snapshot that is not point in time)",
    "evidence: indicators over the bars through the previous close and the decision day's open (StockBench: "
    "the open and the 7 previous closes)",
)


@lru_cache(maxsize=1)
def published() -> dict[str, Any]:
    """The published rows as published, with their source (published.json)."""
    return json.loads(PUBLISHED.read_text())
