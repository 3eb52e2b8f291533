"""Point-in-time news headlines from a JSONL file.

One JSON object per line: {"symbol", "published_at" (YYYY-MM-DD or ISO datetime), "headline",
"source"}, optionally "summary", "url", "id" and "related_symbols"; every number in a line must be finite. A
headline is visible at an as-of date only if published before that day's decision time in the chosen market
(agent.markets.visible: its close, or its open for a profile deciding at the open); a date without a time counts
as after the close. So a decision never reads news that came out after it.
"""

from __future__ import annotations

import bisect
import functools
import json
from pathlib import Path

import pandas as pd

from agent.data import finite
from agent.data.market import DataError, DateLike, parse_date
from agent.markets import MarketProfile, Stamp, parse_stamp, visible

SAMPLE_NEWS = Path(__file__).with_name("sample_news.jsonl")
# kept with an item when given: its summary (a feed's description), its link or the feed's id, the tickers it names
OPTIONAL = ("summary", "url", "id", "related_symbols")
_DAY = pd.Timedelta(days=1)
# a local close is at most a day past UTC midnight: the margin of the coarse window before `visible` decides
_CLOSE_MARGIN = pd.Timedelta(days=2)


def parse_published(value: object) -> pd.Timestamp:
    """Naive UTC timestamp for a published_at value (date-only means midnight); for ordering and recency,
    not for visibility, which `agent.markets.visible` decides."""
    return parse_stamp(value).ts


class NewsSource:
    def __init__(self, items: list[dict], source: str = "<memory>", sha256: str | None = None) -> None:
        self.source = source
        self.sha256 = sha256  # the content hash taken when it was read, where the reader took one (a data tree)
        by_symbol: dict[str, list[tuple[Stamp, str, dict]]] = {}
        for item in items:
            stamp = parse_stamp(item["published_at"])
            rec = {
                "symbol": str(item["symbol"]).strip().upper(),
                "published_at": str(item["published_at"]).strip(),
                "headline": str(item["headline"]),
                "source": str(item.get("source") or "unknown"),
                **{k: item[k] for k in OPTIONAL if item.get(k) not in (None, "", [])},
            }
            by_symbol.setdefault(rec["symbol"], []).append((stamp, rec["headline"], rec))
        self._items: dict[str, list[dict]] = {}
        self._stamps: dict[str, list[Stamp]] = {}
        self._times: dict[str, list[pd.Timestamp]] = {}
        for symbol, rows in by_symbol.items():
            rows.sort(key=lambda r: (r[0].ts, r[1]))  # deterministic order for same-time items
            self._stamps[symbol] = [r[0] for r in rows]
            self._times[symbol] = [r[0].ts for r in rows]
            self._items[symbol] = [r[2] for r in rows]

    def symbols(self) -> list[str]:
        return sorted(self._items)

    def coverage(self) -> dict[str, tuple[int, str, str]]:
        """symbol -> (headlines, first published_at, last published_at), for `tradegraph data check`."""
        return {
            s: (len(items), items[0]["published_at"], items[-1]["published_at"])
            for s, items in sorted(self._items.items())
        }

    def headlines(
        self, symbol: str, as_of: DateLike, lookback_days: int = 30, profile: str | MarketProfile | None = None
    ) -> list[dict]:
        """Headlines published from as_of - lookback_days until before the close of `as_of`, oldest first."""
        key = symbol.upper()
        times = self._times.get(key)
        if not times:
            return []
        day = parse_date(as_of)
        hi = bisect.bisect_left(times, day + _CLOSE_MARGIN)
        lo = bisect.bisect_left(times, day - pd.Timedelta(days=int(lookback_days)))
        return [
            dict(r) for r, st in zip(self._items[key][lo:hi], self._stamps[key][lo:hi]) if visible(st, day, profile)
        ]


def load_news(path: str | Path) -> NewsSource:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # a folder, no permission, a binary file
        raise DataError(f"{p}: cannot read file: {exc}") from None
    items: list[dict] = []
    # newlines only: a headline may hold U+2028, which str.splitlines() would cut (and shift every line number)
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = finite.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}: line {lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{p}: line {lineno}: expected a JSON object")
        bad = finite.first_nonfinite(obj)
        if bad:
            raise DataError(f"{p}: line {lineno}, {finite.nonfinite_message(bad)}")
        missing = [k for k in ("symbol", "published_at", "headline") if not obj.get(k)]
        if missing:
            raise DataError(f"{p}: line {lineno}: missing field(s) {', '.join(missing)}")
        try:
            parse_published(obj["published_at"])
        except (ValueError, TypeError):
            raise DataError(
                f"{p}: line {lineno}: field 'published_at': unparseable date {obj['published_at']!r}"
            ) from None
        items.append(obj)
    return NewsSource(items, source=str(p))


@functools.lru_cache(maxsize=1)
def default_news() -> NewsSource:
    """The shipped SAMPLE (synthetic) headlines; see agent/data/README.md."""
    return load_news(SAMPLE_NEWS)
