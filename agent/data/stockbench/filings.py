"""Fundamentals computed by code from SEC filings (StockBench's `cache/financials/{SYM}.{quarterly,annual}.json`,
statements from Polygon), each figure as a decision on a given day could have known it.

When a filing is public:
- from its `acceptance_datetime` (EDGAR's acceptance, UTC), through `agent.markets.visible`;
- a record with only a `filing_date` counts as that date alone: after that day's close;
- a fourth quarter with neither is derived from the 10-K (full year minus nine months): it is public when that
  10-K is (the annual record with the same period end: its acceptance, else its filing date);
- any other record with neither (two in the shipped data: CAT Q2 2024 with an empty statement, CRM "Q1 2025"
  ending 2024-04-30) is left out, and `data check` counts it.

What is computed, for a symbol and decision day, from the quarters public before the decision (the latest filing
for a period wins):
- TTM = the last four of them by period end, which must be consecutive quarters (period ends 75-105 days apart);
- `eps_ttm` = the sum of their diluted EPS; `pe` = price / eps_ttm, none when a quarter lacks diluted EPS (Visa's
  statements carry none) or eps_ttm <= 0;
- `pb` = price / (equity attributable to the parent / basic weighted-average shares) of the latest quarter, none
  when equity <= 0 (HD and MCD have negative equity). A derived Q4's share counts are full year minus nine months,
  meaningless: its 10-K's full-year count is used;
- `gross_margin_pct`, `operating_margin_pct`, `net_margin_pct` = TTM gross profit, operating income and net income
  over TTM revenues (none when a quarter lacks either: banks report no gross profit);
- `revenue_growth_pct` = the latest quarter's revenues against the quarter ending 350-380 days before it;
- `current_ratio` = current assets / current liabilities and `debt_to_equity` = long-term debt / equity, of the
  latest quarter;
- `price` = the close of the last bar the decision may read whole (`agent.markets.bar_cutoff`), from the run's
  prices; `as_of` = the latest quarter's period end; `reported_at` = when it became public.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from agent.data.market import DataError, DateLike, MarketData, UnknownSymbolError, parse_date
from agent.markets import MarketProfile, Stamp, bar_cutoff, decision_time, get_profile, parse_stamp, published_time
from schemas.features import Fundamentals

# the statement lines read (all else in a filing is left behind when the tree is cached)
ITEMS = {
    "income_statement": (
        "revenues",
        "gross_profit",
        "operating_income_loss",
        "net_income_loss",
        "diluted_earnings_per_share",
        "basic_average_shares",
    ),
    "balance_sheet": (
        "equity",
        "equity_attributable_to_parent",
        "current_assets",
        "current_liabilities",
        "long_term_debt",
    ),
}
BASIS = (
    "TTM: the last 4 quarterly filings public before the decision. P/E: price / TTM diluted EPS. P/B: price / "
    "(parent equity / basic average shares), latest quarter. Margins: TTM. Growth: latest quarter's revenue vs "
    "the same quarter a year before."
)
_QUARTER_GAP = (75, 105)  # days between consecutive quarter ends
_YEAR_GAP = (350, 380)


def reduce_filing(rec: Any, where: str) -> dict:
    """The parts of one filing record the figures need: dates, fiscal labels and the ITEMS lines present."""
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object")
    out: dict[str, Any] = {
        k: rec.get(k)
        for k in ("fiscal_period", "fiscal_year", "start_date", "end_date", "filing_date", "acceptance_datetime")
    }
    if not out["end_date"]:
        raise DataError(f"{where}: missing field end_date")
    _public_after_its_period(out, where)
    statements = rec.get("financials") or {}
    items: dict[str, float] = {}
    for statement, names in ITEMS.items():
        lines = statements.get(statement) or {}
        for name in names:
            line = lines.get(name)
            if line is None:
                continue
            value = line.get("value") if isinstance(line, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise DataError(f"{where}, field 'financials.{statement}.{name}.value': not a number: {value!r}")
            items[name] = float(value)
    out["items"] = items
    return out


def _public_after_its_period(rec: dict, where: str) -> None:
    """A filing reports a period that has ended: one accepted (or filed) on or before its period's last day is a
    record whose dates are wrong, and trusting either would date the figures before they existed. Refused, named.
    (Unparseable dates are left to quarters_of, which names them.)"""
    for field in ("acceptance_datetime", "filing_date"):
        if not rec.get(field):
            continue
        try:
            public, end = parse_stamp(str(rec[field])).ts.date(), parse_date(rec["end_date"]).date()
        except (ValueError, TypeError, DataError):
            return
        if public <= end:
            raise DataError(
                f"{where}: {field} {rec[field]} is not after the period it reports ends (end_date "
                f"{rec['end_date']}): a filing is accepted after its period"
            )
        return  # the acceptance decides when it is public (_stamp); a filing date alone only without one


@dataclass(frozen=True)
class Quarter:
    end: pd.Timestamp
    label: str  # "Q3 2025", for messages
    public: Stamp
    reported_at: str  # the public stamp as the bundle shows it: an instant in UTC, or a date
    items: dict
    shares: Optional[float]  # basic average shares for P/B (a derived Q4: its 10-K's)


def _stamp(rec: dict) -> Optional[Stamp]:
    if rec.get("acceptance_datetime"):
        return parse_stamp(rec["acceptance_datetime"])
    if rec.get("filing_date"):
        return parse_stamp(str(rec["filing_date"])[:10])
    return None


def quarters_of(quarterly: list[dict], annual: list[dict], where: str) -> tuple[list[Quarter], list[str]]:
    """(the quarters with a public time, the labels of those left out for having none)."""
    years = {r["end_date"]: r for r in annual}
    out, left_out = [], []
    for rec in quarterly:
        label = f"{rec.get('fiscal_period')} {rec.get('fiscal_year')} (ending {rec['end_date']})"
        year = years.get(rec["end_date"]) if rec.get("fiscal_period") == "Q4" else None
        try:
            stamp = _stamp(rec) or (_stamp(year) if year else None)
            end = parse_date(rec["end_date"])
        except (ValueError, TypeError, DataError) as exc:
            raise DataError(f"{where}: {label}: unparseable date: {exc}") from None
        if stamp is None:
            left_out.append(label)
            continue
        shares = rec["items"].get("basic_average_shares")
        if not (shares and shares > 0) and year:
            shares = year["items"].get("basic_average_shares")
        out.append(
            Quarter(
                end,
                label,
                stamp,
                str(stamp.ts.date()) if stamp.date_only else stamp.ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
                rec["items"],
                shares if shares and shares > 0 else None,
            )
        )
    return out, left_out


class FilingFundamentals:
    """Fundamentals by code from filings: `get` answers what a decision on a day could know (module docstring)."""

    def __init__(
        self,
        filings: dict[str, tuple[list[Quarter], list[str]]],
        market: MarketData,
        source: str,
        origin: str,
        sha256: Optional[str] = None,
    ) -> None:
        self.source = source  # the label bundles carry
        self.origin = origin  # the tree it was read from: the run manifest names it
        self.sha256 = sha256
        self._market = market  # the tree's own bars: the price when a caller gives none
        self._quarters = {s: q for s, (q, _) in filings.items()}
        self._left_out = {s: lo for s, (_, lo) in filings.items()}
        self._by_profile: dict[tuple[str, MarketProfile], tuple[list[pd.Timestamp], list[Quarter]]] = {}

    def __repr__(self) -> str:
        return f"FilingFundamentals({self.origin!r}, symbols={sorted(self._quarters)})"

    def coverage(self) -> dict[str, tuple[int, str, str]]:
        """symbol -> (quarterly filings with a public time, first period end, last period end)."""
        return {
            s: (len(q), str(min(x.end for x in q).date()), str(max(x.end for x in q).date()))
            for s, q in sorted(self._quarters.items())
            if q
        }

    def left_out(self) -> dict[str, list[str]]:
        """symbol -> the quarters left out for having no public time."""
        return {s: lo for s, lo in sorted(self._left_out.items()) if lo}

    def _public(self, symbol: str, profile: MarketProfile) -> tuple[list[pd.Timestamp], list[Quarter]]:
        """The symbol's quarters ordered by when they became public under `profile`, and those times."""
        key = (symbol, profile)
        if key not in self._by_profile:
            rows = sorted(
                ((published_time(q.public, profile), q) for q in self._quarters.get(symbol, ())),
                key=lambda r: (r[0], r[1].end),
            )
            self._by_profile[key] = ([t for t, _ in rows], [q for _, q in rows])
        return self._by_profile[key]

    def visible(self, symbol: str, as_of: DateLike, profile: str | MarketProfile | None = None) -> list[Quarter]:
        """The quarters public before the decision on `as_of`, one per period (its latest filing), by period end."""
        p = get_profile(profile)
        times, quarters = self._public(symbol.upper(), p)
        n = bisect.bisect_left(times, decision_time(p, parse_date(as_of)))
        latest = {q.end: q for q in quarters[:n]}  # later public wins: a restatement replaces its period
        return [latest[e] for e in sorted(latest)]

    def get(
        self,
        symbol: str,
        as_of: DateLike,
        profile: str | MarketProfile | None = None,
        market: Optional[MarketData] = None,
    ) -> Fundamentals:
        """The figures a decision on `as_of` may know, priced from `market` (the run's bars; else the tree's)."""
        p = get_profile(profile)
        day = parse_date(as_of)
        known = self.visible(symbol, day, p)
        if not known:
            return Fundamentals(available=False)
        latest = known[-1]
        price, price_date = _last_close(
            market if market is not None else self._market, symbol.upper(), bar_cutoff(p, day)
        )
        ttm = _ttm(known)
        eps = _sum(ttm, "diluted_earnings_per_share")
        revenue = _sum(ttm, "revenues")
        li = latest.items
        equity = li.get("equity_attributable_to_parent", li.get("equity"))
        figures = {
            "eps_ttm": eps,
            "pe": _div(price, eps) if eps is not None and eps > 0 else None,
            "pb": _div(price, _div(equity, latest.shares)) if equity is not None and equity > 0 else None,
            "gross_margin_pct": _pct(_sum(ttm, "gross_profit"), revenue),
            "operating_margin_pct": _pct(_sum(ttm, "operating_income_loss"), revenue),
            "net_margin_pct": _pct(_sum(ttm, "net_income_loss"), revenue),
            "revenue_growth_pct": _growth(known),
            "current_ratio": _div(li.get("current_assets"), li.get("current_liabilities")),
            "debt_to_equity": _div(li.get("long_term_debt"), equity) if equity is not None and equity > 0 else None,
        }
        return Fundamentals(
            available=True,
            source=self.source,
            as_of=str(latest.end.date()),
            reported_at=latest.reported_at,
            price=price,
            price_date=price_date,
            basis=BASIS,
            **_bounded(figures),
        )


def _last_close(market: MarketData, symbol: str, cutoff: pd.Timestamp) -> tuple[Optional[float], Optional[str]]:
    try:
        last = market.as_of(symbol, cutoff, lookback=1)
    except UnknownSymbolError:
        return None, None
    if last.empty:
        return None, None
    return float(last["close"].iloc[-1]), str(last.index[-1].date())


def _ttm(known: list[Quarter]) -> Optional[list[Quarter]]:
    last4 = known[-4:]
    if len(last4) < 4:
        return None
    for a, b in zip(last4, last4[1:]):
        if not _QUARTER_GAP[0] <= (b.end - a.end).days <= _QUARTER_GAP[1]:
            return None
    return last4


def _sum(quarters: Optional[list[Quarter]], item: str) -> Optional[float]:
    if quarters is None or any(item not in q.items for q in quarters):
        return None
    return sum(q.items[item] for q in quarters)


def _div(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None or b == 0 else a / b


def _pct(part: Optional[float], whole: Optional[float]) -> Optional[float]:
    return None if part is None or whole is None or whole <= 0 else 100.0 * part / whole


def _growth(known: list[Quarter]) -> Optional[float]:
    latest = known[-1]
    for q in reversed(known[:-1]):
        if _YEAR_GAP[0] <= (latest.end - q.end).days <= _YEAR_GAP[1]:
            now, then = latest.items.get("revenues"), q.items.get("revenues")
            return None if now is None or then is None or then <= 0 else 100.0 * (now / then - 1.0)
    return None


# each figure's bounds in schemas.features.Fundamentals, and its rounding: a value outside them is left out
_BOUNDS = {
    "pe": (-1e6, 1e6, 2),
    "pb": (-1e6, 1e6, 2),
    "eps_ttm": (-1e5, 1e5, 4),
    "current_ratio": (0, 1e4, 4),
    "debt_to_equity": (-1e4, 1e4, 4),
}
_PCT_BOUNDS = (-1000, 1000, 2)


def _bounded(figures: dict[str, Optional[float]]) -> dict[str, Optional[float]]:
    out = {}
    for name, value in figures.items():
        lo, hi, digits = _BOUNDS.get(name, _PCT_BOUNDS)
        out[name] = round(value, digits) if value is not None and lo < value < hi else None
    return out
