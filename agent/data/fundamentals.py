"""Point-in-time fundamentals from a JSON file; absent data is reported, never invented.

Format: {"source": "...", "records": [{"symbol", "as_of": "YYYY-MM-DD", "pe", "pb",
"ev_ebitda", "revenue_growth_pct", "net_margin_pct"}, ...]}. Any metric may be null.
"""
from __future__ import annotations

import bisect
import functools
import json
from pathlib import Path

import pandas as pd

from agent.data.market import DataError, DateLike, parse_date
from schemas.features import Fundamentals

SAMPLE_FUNDAMENTALS = Path(__file__).with_name("sample_fundamentals.json")
METRICS = ("pe", "pb", "ev_ebitda", "revenue_growth_pct", "net_margin_pct")


class FundamentalsSource:
    def __init__(self, records: list[dict], source: str = "sample") -> None:
        self.source = source
        by_symbol: dict[str, list[tuple[pd.Timestamp, dict]]] = {}
        for rec in records:
            by_symbol.setdefault(str(rec["symbol"]).upper(), []).append((parse_date(rec["as_of"]), rec))
        self._dates: dict[str, list[pd.Timestamp]] = {}
        self._recs: dict[str, list[dict]] = {}
        for symbol, rows in by_symbol.items():
            rows.sort(key=lambda r: r[0])
            self._dates[symbol] = [r[0] for r in rows]
            self._recs[symbol] = [r[1] for r in rows]

    def get(self, symbol: str, as_of: DateLike) -> Fundamentals:
        """Latest record dated on/before `as_of`, else Fundamentals(available=False)."""
        dates = self._dates.get(symbol.upper())
        if not dates:
            return Fundamentals(available=False)
        i = bisect.bisect_right(dates, parse_date(as_of))
        if i == 0:
            return Fundamentals(available=False)
        rec = self._recs[symbol.upper()][i - 1]
        values = {k: (None if rec.get(k) is None else float(rec[k])) for k in METRICS}
        return Fundamentals(available=True, source=self.source, as_of=str(dates[i - 1].date()), **values)


def load_fundamentals(path: str | Path) -> FundamentalsSource:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{p}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise DataError(f"{p}: expected an object with a 'records' list")
    for n, rec in enumerate(records, start=1):
        missing = [k for k in ("symbol", "as_of") if not isinstance(rec, dict) or not rec.get(k)]
        if missing:
            raise DataError(f"{p}: record {n}: missing field(s) {', '.join(missing)}")
        try:
            parse_date(rec["as_of"])
        except DataError as exc:
            raise DataError(f"{p}: record {n}, field 'as_of': {exc}") from None
        for k in METRICS:
            v = rec.get(k)
            if v is not None and not isinstance(v, (int, float)):
                raise DataError(f"{p}: record {n}, field '{k}': not a number: {v!r}")
    return FundamentalsSource(records, source=str(doc.get("source") or p.name))


@functools.lru_cache(maxsize=1)
def default_fundamentals() -> FundamentalsSource:
    """The shipped SAMPLE (synthetic) fundamentals: AAPL and MSFT only, so others are unavailable."""
    return load_fundamentals(SAMPLE_FUNDAMENTALS)
