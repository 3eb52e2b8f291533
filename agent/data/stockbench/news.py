"""StockBench's news files as dated items: each at its TRUE publication time, duplicates counted once.

`cache/news_by_day/{SYM}/{DATE}.json` holds `{"items": [...]}` from two feeds:
- Finnhub items carry `datetime`, the feed's Unix time (true UTC), and `published_utc`, which despite its name is
  the collector's local time (UTC+8) without a zone: `datetime.fromtimestamp(ts).isoformat()` in StockBench's
  finnhub client. In all 5,256 shipped items the label is exactly 8 hours ahead. The epoch is what is read.
- Polygon items carry `published_utc` with a `Z`: true UTC, read as such.
An item with neither an epoch nor a zoned time is refused: its hour is unknown, and guessing it could show a
decision news from after it.

The same item is one item within a symbol: the same feed id, or the same link, or the same normalised title at the
same true time (a press release both feeds carried: JNJ's 2025-04-26 TAR-200 release is the one in the shipped data).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from agent.data.market import DataError

_WORDS = re.compile(r"\W+")


def true_time(item: dict, where: str) -> str:
    """The item's publication instant as `YYYY-MM-DDTHH:MM:SSZ`."""
    epoch = item.get("datetime")
    if epoch is not None:
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
            raise DataError(f"{where}, field 'datetime': not a Unix time: {epoch!r}")
        try:
            return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, OSError, ValueError):
            raise DataError(f"{where}, field 'datetime': not a Unix time: {epoch!r}") from None
    label = item.get("published_utc")
    if isinstance(label, str) and (label.endswith("Z") or re.search(r"[+-]\d{2}:?\d{2}$", label)):
        ts = pd.Timestamp(label)
        if not pd.isna(ts):
            return ts.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
    raise DataError(
        f"{where}: published_utc {label!r} has no time zone and there is no 'datetime' epoch: its true "
        f"publication time is unknown (a Finnhub label is the collector's local time)"
    )


def item_of(symbol: str, raw: Any, where: str) -> dict:
    """One feed item as a news record (agent.data.news.NewsSource's fields)."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a JSON object")
    title = raw.get("title")
    if not isinstance(title, str) or not title.strip():
        raise DataError(f"{where}: missing field title")
    publisher = raw["publisher"] if isinstance(raw.get("publisher"), dict) else {}
    rec: dict[str, Any] = {
        "symbol": symbol,
        "published_at": true_time(raw, where),
        "headline": title.strip(),
        "source": str(raw.get("source") or publisher.get("name") or "unknown"),
    }
    summary = raw.get("description")
    if isinstance(summary, str) and summary.strip():
        rec["summary"] = summary.strip()
    url = raw.get("url") or raw.get("article_url")
    if isinstance(url, str) and url:
        rec["url"] = url
    if raw.get("id") not in (None, ""):
        rec["id"] = str(raw["id"])
    related = raw.get("related_symbols") or raw.get("tickers")
    if isinstance(related, list) and related:
        rec["related_symbols"] = [str(s) for s in related]
    return rec


def keys(rec: dict) -> set[tuple]:
    """What makes two records the same item: any shared key."""
    out: set[tuple] = {("title", _WORDS.sub(" ", rec["headline"].lower()).strip(), rec["published_at"])}
    if "id" in rec:
        out.add(("id", rec["id"]))
    if "url" in rec:
        out.add(("url", rec["url"]))
    return out


def dedup(records: list[dict]) -> tuple[list[dict], int]:
    """The records of one symbol with later copies of an item dropped, and how many were dropped."""
    seen: set[tuple] = set()
    kept: list[dict] = []
    for rec in records:
        ks = keys(rec)
        if not ks & seen:
            kept.append(rec)
        seen |= ks
    return kept, len(records) - len(kept)
