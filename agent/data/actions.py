"""Corporate actions: cash dividends and splits, as the data states them, and what each means for a holder.

Count nothing twice. What an action does to a position depends on how the bars it goes with were adjusted:
- A split is never applied to shares when the bars are split-adjusted (StockBench's bars are: Polygon's
  `adjusted=true`; so is a price file with `adj_close`). The split is already in every price, so a position held
  across it is already in post-split units. `splits()` is there to be reported and checked, not to re-split.
- A cash dividend is credited in cash on its ex-date only when the bars are NOT dividend-adjusted. StockBench's bars
  are not (AAPL closes 238.03 on 2025-03-03, the printed price), so its dividends are real cash to a holder. A price
  file with `adj_close` (Yahoo's, the bundled sample's) already carries every dividend in its prices: its actions
  are "none" (`no_corporate_actions.json`, the default of the `corporate_actions` kind), never the dividends again.
- A dividend's `cash_amount` is per share as the company declared it, on its ex-date. On split-adjusted bars a
  position's shares are post-split units, so the cash per held share is `per_share`: `cash_amount` divided by the
  ratio of every split in the data executed after the ex-date (AAPL's 2.65 of 2012-08-09 is 0.0946 per share of
  today's bars, after 7:1 and 4:1). No split falls after a 2025 ex-date in StockBench's data, so there the two agree.

A file of your own: {"source": "...", "dividends": [{"symbol", "ex_dividend_date", "cash_amount", "pay_date"?}],
"splits": [{"symbol", "execution_date", "split_from", "split_to"}]} (StockBench's field names; `ticker` is read as
`symbol`). Every number finite and positive; a bad record raises DataError naming the file, the list and the record.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from agent.data import finite
from agent.data.market import DataError, DateLike, parse_date

NO_ACTIONS = Path(__file__).with_name("no_corporate_actions.json")


@dataclass(frozen=True)
class Dividend:
    symbol: str
    ex_date: str  # YYYY-MM-DD: a holder at that day's open is paid
    cash_amount: float  # per share, as declared on the ex-date
    per_share: float  # per share of split-adjusted bars (cash_amount / the ratio of later splits)
    pay_date: Optional[str] = None
    kind: Optional[str] = None  # the feed's dividend type: CD regular cash, SC special cash


@dataclass(frozen=True)
class Split:
    symbol: str
    execution_date: str
    split_from: float
    split_to: float

    @property
    def ratio(self) -> float:
        """New shares per old share (4.0 for a 4-for-1)."""
        return self.split_to / self.split_from


class CorporateActions:
    """Dividends and splits per symbol, each list sorted by date; read-only after construction."""

    def __init__(
        self,
        dividends: Iterable[Dividend],
        splits: Iterable[Split],
        source: str = "<memory>",
        origin: Optional[str] = None,
        sha256: Optional[str] = None,
    ) -> None:
        self.source = source
        self.origin = origin or source  # the file or tree it came from: the run manifest names it
        self.sha256 = sha256
        self._dividends: dict[str, list[Dividend]] = {}
        self._splits: dict[str, list[Split]] = {}
        for d in sorted(dividends, key=lambda d: (d.ex_date, d.cash_amount)):
            self._dividends.setdefault(d.symbol, []).append(d)
        for s in sorted(splits, key=lambda s: s.execution_date):
            self._splits.setdefault(s.symbol, []).append(s)
        self._ex_dates = {s: [d.ex_date for d in ds] for s, ds in self._dividends.items()}
        self._split_dates = {s: [x.execution_date for x in xs] for s, xs in self._splits.items()}

    def __repr__(self) -> str:
        return f"CorporateActions({self.source!r}, symbols={self.symbols()})"

    def symbols(self) -> list[str]:
        return sorted(set(self._dividends) | set(self._splits))

    def dividends(self, symbol: str, after: DateLike, through: DateLike) -> list[Dividend]:
        """Dividends whose ex-date is after `after` and on or before `through`: those a position held from the
        close of `after` through the open of `through` is owed."""
        return _window(self._dividends.get(symbol.upper(), []), self._ex_dates.get(symbol.upper(), []), after, through)

    def splits(self, symbol: str, after: DateLike, through: DateLike) -> list[Split]:
        """Splits executed after `after`, on or before `through`. Already in split-adjusted bars: report them,
        never apply them to shares as well."""
        return _window(self._splits.get(symbol.upper(), []), self._split_dates.get(symbol.upper(), []), after, through)

    def coverage(self) -> dict[str, tuple[int, int, str, str]]:
        """symbol -> (dividends, splits, first ex-date, last ex-date), for `tradegraph data check`."""
        out = {}
        for s in self.symbols():
            ds = self._dividends.get(s, [])
            out[s] = (
                len(ds),
                len(self._splits.get(s, [])),
                ds[0].ex_date if ds else "-",
                ds[-1].ex_date if ds else "-",
            )
        return out


def _window(items: list, dates: list[str], after: DateLike, through: DateLike) -> list:
    lo = bisect.bisect_right(dates, _iso(after))
    hi = bisect.bisect_right(dates, _iso(through))
    return items[lo:hi]


def _iso(value: DateLike) -> str:
    return str(parse_date(value).date())


def build_actions(dividends: list[dict], splits: list[dict], where: str, **kw: Any) -> CorporateActions:
    """CorporateActions from raw records in StockBench's field names; `where` names the input in errors. Each
    dividend's per-share amount is divided by the ratio of the symbol's splits executed after its ex-date."""
    split_objs = [_split(r, f"{where}: splits record {n}") for n, r in enumerate(splits, start=1)]
    later: dict[str, list[Split]] = {}
    for s in split_objs:
        later.setdefault(s.symbol, []).append(s)
    divs = []
    for n, r in enumerate(dividends, start=1):
        symbol, ex, amount, pay, kind = _dividend(r, f"{where}: dividends record {n}")
        ratio = 1.0
        for s in later.get(symbol, ()):
            if s.execution_date > ex:
                ratio *= s.ratio
        divs.append(Dividend(symbol, ex, amount, amount / ratio, pay, kind))
    return CorporateActions(divs, split_objs, **kw)


def _record(rec: object, where: str) -> tuple[dict, str]:
    """(the record, its symbol), or DataError naming what is wrong with it."""
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object")
    bad = finite.first_nonfinite(rec)
    if bad:
        raise DataError(f"{where}, {finite.nonfinite_message(bad)}")
    symbol = rec.get("symbol") or rec.get("ticker")
    if not isinstance(symbol, str) or not symbol.strip():
        raise DataError(f"{where}: missing field symbol (or ticker)")
    return rec, symbol.strip().upper()


def _date(rec: dict, key: str, where: str) -> str:
    value = _optional_date(rec, key, where)
    if value is None:
        raise DataError(f"{where}: missing field {key}")
    return value


def _optional_date(rec: dict, key: str, where: str) -> Optional[str]:
    value = rec.get(key)
    if value in (None, ""):
        return None
    try:
        return _iso(str(value))
    except DataError as e:
        raise DataError(f"{where}, field '{key}': {e}") from None


def _positive(rec: dict, key: str, where: str) -> float:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise DataError(f"{where}, field '{key}': expected a positive number, got {value!r}")
    return float(value)


def _dividend(raw: object, where: str) -> tuple[str, str, float, Optional[str], Optional[str]]:
    rec, symbol = _record(raw, where)
    kind = rec.get("dividend_type")
    return (
        symbol,
        _date(rec, "ex_dividend_date", where),
        _positive(rec, "cash_amount", where),
        _optional_date(rec, "pay_date", where),
        str(kind) if kind else None,
    )


def _split(raw: object, where: str) -> Split:
    rec, symbol = _record(raw, where)
    return Split(
        symbol,
        _date(rec, "execution_date", where),
        _positive(rec, "split_from", where),
        _positive(rec, "split_to", where),
    )


def load_actions(path: str | Path) -> CorporateActions:
    p = Path(path)
    doc = finite.read_json(p)
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k, []), list) for k in ("dividends", "splits")):
        raise DataError(f"{p}: expected an object with 'dividends' and 'splits' lists")
    return build_actions(
        doc.get("dividends", []), doc.get("splits", []), str(p), source=str(doc.get("source") or p.name), origin=str(p)
    )


@functools.lru_cache(maxsize=1)
def default_actions() -> CorporateActions:
    """None: the bundled sample prices carry every split and dividend in their adjusted close."""
    return load_actions(NO_ACTIONS)
