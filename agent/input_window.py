"""How much of the news and of its own past a cycle is shown: tradegraph's window, or StockBench's.

StockBench's paper (arXiv 2510.02209 v1, its protocol as stated with Table 2) gives its agent "up to 5 news items from the previous 48 hours"
and "the last 7 days of actions"; a StockBench run (graph/services/benchmark/stockbench/) decides on exactly that
window, every other run on tradegraph's. The window is part of the run's configuration (AgentConfig.inputs), so the
manifest records it and a replay rebuilds it; it is written there only when it is not tradegraph's, so a recording
made before it existed reads as it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

# tradegraph's own: the newest unique headlines a bundle carries (what the news analyst reads; docs/benchmarks.md:
# prompt tokens), from the calendar days before the as-of date
NEWS_ITEMS = 6
NEWS_LOOKBACK_DAYS = 30
# StockBench's, as its paper states them
STOCKBENCH_NEWS_ITEMS = 5
STOCKBENCH_NEWS_HOURS = 48
STOCKBENCH_RECALL_DAYS = 7


@dataclass(frozen=True)
class InputWindow:
    # at most this many unique headlines, the newest first
    news_items: int = NEWS_ITEMS
    # headlines published in the `news_days` calendar days before the as-of date; when `news_hours` is set, instead
    # in the `news_hours` hours before the decision time, counted by the clock (weekends included). Either way only
    # what was public before the decision time (agent.markets.visible)
    news_days: int = NEWS_LOOKBACK_DAYS
    news_hours: Optional[int] = None
    # whether the news count and net sentiment summarise only the headlines shown (the agent sees nothing of the
    # others) or every unique headline of the window
    summarise_shown: bool = False
    # past notes recalled: those known in the `recall_days` calendar days before the as-of date; None: any date
    # before it
    recall_days: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("news_items", "news_days", "news_hours", "recall_days"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"input window {name}={value!r}: must be a whole number from 1")

    @property
    def coarse_news_days(self) -> int:
        """Calendar days before the as-of date that surely hold the whole window (a decision time is within a day
        of the as-of date's midnight UTC in every market): what a news source is asked for before the exact cut."""
        return self.news_days if self.news_hours is None else -(-self.news_hours // 24) + 2

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> InputWindow:
        """The window a manifest or benchmark file recorded (its keys as written by dataclasses.asdict)."""
        try:
            return cls(**raw)
        except TypeError as e:  # a key this code does not know: a window it cannot apply
            raise ValueError(f"input window {raw!r}: {e}") from None


TRADEGRAPH = InputWindow()
STOCKBENCH = InputWindow(
    news_items=STOCKBENCH_NEWS_ITEMS,
    news_hours=STOCKBENCH_NEWS_HOURS,
    summarise_shown=True,
    recall_days=STOCKBENCH_RECALL_DAYS,
)
