"""Point-in-time fundamentals from a JSON file; absent data is reported, never invented.

Format: {"source": "...", "records": [{"symbol", "as_of": "YYYY-MM-DD" (the period end the figures
describe), "reported_at": YYYY-MM-DD or ISO datetime (when they became public), "pe", "pb",
"ev_ebitda", "revenue_growth_pct", "net_margin_pct"}, ...]}. Any metric may be null; every number must be
finite (NaN and Infinity, which Python's json would read, are refused naming the record and field).

A record is visible only once reported (agent.markets.visible: before the decision day's close; a
date alone counts as after the close). Results come out weeks after the period they describe, so
keying on the period end would hand a backtest figures nobody had yet: `reported_at` is required.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd

from agent.data import finite
from agent.data.market import DataError, DateLike, parse_date
from agent.markets import MarketProfile, Stamp, parse_stamp, visible
from schemas.features import Fundamentals

SAMPLE_FUNDAMENTALS = Path(__file__).with_name("sample_fundamentals.json")
METRICS = ("pe", "pb", "ev_ebitda", "revenue_growth_pct", "net_margin_pct")
_REQUIRED = ("symbol", "as_of", "reported_at")
# a local close is at most a day past UTC midnight: the margin of the coarse cut before `visible` decides
_CLOSE_MARGIN = pd.Timedelta(days=2)


def _checked(rec: object, n: int, source: str) -> tuple[str, pd.Timestamp, Stamp, dict]:
    """(symbol, period end, reported time for ordering, record); a bad record raises naming source and record n."""
    if not isinstance(rec, dict):
        raise DataError(f"{source}: record {n}: expected a JSON object")
    where = f"{source}: record {n}" + (f" ({rec['symbol']}, as_of {rec.get('as_of')})" if rec.get("symbol") else "")
    missing = [k for k in _REQUIRED if not rec.get(k)]
    if missing:
        hint = " (the date the figures became public, e.g. the filing date)" if "reported_at" in missing else ""
        raise DataError(f"{where}: missing field(s) {', '.join(missing)}{hint}")
    try:
        period = parse_date(rec["as_of"])
    except DataError as exc:
        raise DataError(f"{where}, field 'as_of': {exc}") from None
    try:
        reported = parse_stamp(rec["reported_at"])
    except (ValueError, TypeError):
        raise DataError(f"{where}, field 'reported_at': unparseable date {rec['reported_at']!r}") from None
    if reported.ts.normalize() < period:
        raise DataError(f"{where}: reported_at {rec['reported_at']} is before the period end as_of {rec['as_of']}")
    # one spelling in bundles: the date alone, or the instant in UTC
    rec = {
        **rec,
        "reported_at": str(reported.ts.date()) if reported.date_only else reported.ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    bad = finite.first_nonfinite(rec)
    if bad:
        raise DataError(f"{where}, {finite.nonfinite_message(bad)}")
    for k in METRICS:
        v = rec.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise DataError(f"{where}, field '{k}': not a number: {v!r}")
    return str(rec["symbol"]).strip().upper(), period, reported, rec


class FundamentalsSource:
    def __init__(self, records: list[dict], source: str = "sample", origin: str | None = None) -> None:
        """`source` is the label carried into bundles; `origin` (default: source) names the input in errors."""
        self.source = source
        self.origin = origin or source  # the file it came from: the run manifest hashes it
        by_symbol: dict[str, list[tuple[Stamp, pd.Timestamp, dict]]] = {}
        for n, rec in enumerate(records, start=1):
            symbol, period, reported, rec = _checked(rec, n, origin or source)
            by_symbol.setdefault(symbol, []).append((reported, period, rec))
        self._rows = {s: sorted(rows, key=lambda r: (r[0].ts, r[1])) for s, rows in by_symbol.items()}

    def coverage(self) -> dict[str, tuple[int, str, str]]:
        """symbol -> (records, first period end, last period end), for `tradegraph data check`."""
        return {
            s: (len(rows), str(min(r[1] for r in rows).date()), str(max(r[1] for r in rows).date()))
            for s, rows in sorted(self._rows.items())
        }

    def get(
        self, symbol: str, as_of: DateLike, profile: str | MarketProfile | None = None, market: object = None
    ) -> Fundamentals:
        """The latest period among records reported before the decision on `as_of`, else available=False. The
        figures are the file's own (its P/E was priced by whoever wrote it): `market` is not read."""
        day = parse_date(as_of)
        known = [
            (period, reported.ts, rec)
            for reported, period, rec in self._rows.get(symbol.upper(), ())
            if reported.ts < day + _CLOSE_MARGIN and visible(reported, day, profile)
        ]
        if not known:
            return Fundamentals(available=False)
        period, _, rec = max(known, key=lambda r: (r[0], r[1]))  # a restatement of the same period wins
        values: dict[str, Any] = {k: (None if rec.get(k) is None else float(rec[k])) for k in METRICS}
        return Fundamentals(
            available=True,
            source=self.source,
            as_of=str(period.date()),
            reported_at=str(rec["reported_at"]).strip(),
            **values,
        )


def load_fundamentals(path: str | Path) -> FundamentalsSource:
    p = Path(path)
    doc = finite.read_json(p)
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise DataError(f"{p}: expected an object with a 'records' list")
    bad = finite.first_nonfinite({k: v for k, v in doc.items() if k != "records"})
    if bad:
        raise DataError(f"{p}: {finite.nonfinite_message(bad)}")
    return FundamentalsSource(records, source=str(doc.get("source") or p.name), origin=str(p))


@functools.lru_cache(maxsize=1)
def default_fundamentals() -> FundamentalsSource:
    """The shipped SAMPLE (synthetic) fundamentals: AAPL and MSFT only, so others are unavailable."""
    return load_fundamentals(SAMPLE_FUNDAMENTALS)
