"""StockBench's protocol as tradegraph runs it, and every way tradegraph departs from it.

The defaults are the paper's (arXiv 2510.02209; its repository's scripts/run_benchmark.sh and config.yaml): the
20 DJIA symbols, 2025-03-01..2025-06-30 (83 sessions), 100,000 cash, long-only, decisions at the open with fills
at the open, commission 1 bp and slippage 2 bp, and its inputs: up to 5 news items from the previous 48 hours and
the last 7 days of actions (agent/input_window.py STOCKBENCH, which every cycle of the run decides on). The scorecard prints the departures beside the table, so a
reader never takes tradegraph's row for a run of StockBench's own agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from agent.input_window import (
    STOCKBENCH,
    STOCKBENCH_NEWS_HOURS,
    STOCKBENCH_NEWS_ITEMS,
    STOCKBENCH_RECALL_DAYS,
    InputWindow,
)
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
    # the news and past the agents are shown: the paper's, unless a caller sets another (then printed as a departure)
    input_window: InputWindow = STOCKBENCH
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
                    "agents recall notes of every run on the symbol, not only this run's"
                    if self.memory == "on"
                    else "agents recall no past notes"
                )
                + " (StockBench shows each symbol's own actions of the last 7 days, as "
                "tradegraph's default 'session' recalls the run's own notes)"
            )
        if self.model_temperature != TEMPERATURE:
            lines.append(
                f"temperature {self.model_temperature:g} for a provider's model, the paper's is "
                f"{TEMPERATURE:g} (Table 2: each model the mean of 3 runs at {TEMPERATURE:g})"
            )
        lines += _window_departures(self.input_window)
        return lines + list(ALWAYS) + ([] if self.memory == "off" else [RECALL])


def _window_departures(window: InputWindow) -> list[str]:
    """A news or recall window other than the paper's (agent/input_window.py STOCKBENCH), one line each."""
    lines = []
    news = (window.news_items, window.news_hours, window.summarise_shown)
    if news != (STOCKBENCH.news_items, STOCKBENCH.news_hours, STOCKBENCH.summarise_shown):
        span = f"{window.news_days} days" if window.news_hours is None else f"{window.news_hours} hours"
        lines.append(
            f"news: up to {window.news_items} items from the previous {span}"
            + ("" if window.summarise_shown else ", the count and sentiment of every item in it")
            + f"; the paper's are up to {STOCKBENCH_NEWS_ITEMS} from the previous {STOCKBENCH_NEWS_HOURS} hours"
        )
    if window.recall_days != STOCKBENCH.recall_days:
        span = "any earlier date" if window.recall_days is None else f"the last {window.recall_days} days"
        lines.append(f"recall: notes from {span}, the paper's are the last {STOCKBENCH_RECALL_DAYS} days of actions")
    return lines


# What tradegraph does differently on any run, measured or read in StockBench's engine (docs/stockbench.md).
ALWAYS: tuple[str, ...] = (
    "agent: tradegraph's eight-state machine (analysts, debate, trader, risk engine), not StockBench's two-stage "
    "agent; code sizes every order from ATR-anchored stops and a risk budget, the model never names an amount",
    "orders: whole shares (StockBench: 0.01 share), and a decision fills all or nothing, sells first "
    "(StockBench skips a buy that lacks cash, in universe order)",
    "slippage moves the fill price, so it costs cash (StockBench books it in the cost basis only)",
    "risk limits: per-symbol notional, open positions, risk at the stops and gross exposure are enforced "
    "(StockBench enforces none)",
    f"news: up to {STOCKBENCH_NEWS_ITEMS} unique items published in the {STOCKBENCH_NEWS_HOURS} hours before the "
    f"09:30 New York open of the decision day, by true publication time and counted by the clock, weekends included "
    f"(a Monday's decision sees nothing published before Saturday 09:30); each a headline with code's event class, recency weight and sentiment, the "
    f"count and net sentiment of those shown. StockBench reads Finnhub's mislabelled UTC+8 times and, offline, "
    f"falls back to a window that reaches past the open on 18 symbol-days of this window",
    "fundamentals: computed by code from SEC filings visible from their acceptance time (StockBench shows a "
    "vendor snapshot that is not point in time)",
    "evidence: indicators over the bars through the previous close and the decision day's open (StockBench: "
    "the open and the 7 previous closes)",
)


# What the agents recall (unless memory is off) against the paper's "last 7 days of actions".
RECALL = (
    f"recall: each agent is given the few notes (TRADEGRAPH_MEMORY_TOP_K, 3 by default) on the symbol ranked most "
    f"relevant to it among those known in the {STOCKBENCH_RECALL_DAYS} calendar days before the decision date: "
    f"each past decision's thesis, levels and orders, and reviews of closed trades (the paper's input: \"the last "
    f'{STOCKBENCH_RECALL_DAYS} days of actions")'
)


@lru_cache(maxsize=1)
def published() -> dict[str, Any]:
    """The published rows as published, with their source (published.json)."""
    return json.loads(PUBLISHED.read_text())
