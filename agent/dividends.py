"""Cash dividends, as the data states them.

StockBench's bars are split-adjusted and not dividend-adjusted (AAPL's 2025-03-03 close is the raw print), and so
are the bundled sample's: a dividend leaves no trace in the prices, so a held position is paid `shares ×
cash_amount` in cash on the ex-date, before that day's decision (StockBench's engine credits it before the open's
trades). A split is never applied to the shares: the bars are already adjusted for it, and a position's shares
are counted in the same adjusted units.

Each position remembers the decision day through which it was credited (`Position.dividends_through`), so an
ex-date is paid once: a cycle on `day` credits the ex-dates in (that day, or the last buy, `day`], and a position
that closed on its levels on an earlier date only the ex-dates through that date.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from schemas.portfolio import DividendCredit, PortfolioSnapshot, Position


class Dividend(Protocol):
    ex_date: str  # YYYY-MM-DD: a holder at that day's open is paid
    per_share: float  # cash per share of the (split-adjusted) bars the positions are counted in


class DividendSource(Protocol):
    """Where cash dividends come from: agent/data/actions.py's CorporateActions (a file of your own, StockBench's
    tree); the bundled sample has none (its adjusted closes already carry them)."""

    def dividends(self, symbol: str, after: str, through: str) -> Sequence[Dividend]:
        """Each cash dividend of `symbol` whose ex-date is in (after, through], ISO dates."""


def _since(pos: Position, day: str) -> str:
    """The day after which this position's ex-dates are still unpaid: the later of its last credit and its last
    buy (bought on an ex-date, or after it, is no claim to that dividend). A position recorded with neither
    starts today: nothing before is known to be owed."""
    marks = [d for d in (pos.dividends_through, pos.opened) if d]
    return max(marks) if marks else day


def due_dividends(
    portfolio: PortfolioSnapshot, source: DividendSource, day: str, closed_on: Mapping[str, str] | None = None
) -> list[DividendCredit]:
    """The cash each held position is owed for ex-dates since its last credit through `day` (through its exit's
    date for a position that closed on its levels), in (ex-date, symbol) order. A source answer that is no ISO
    date in the window or no positive amount raises ValueError naming it: nothing is credited on bad data."""
    credits = []
    for sym in sorted(portfolio.positions):
        pos = portfolio.positions[sym]
        after, through = _since(pos, day), (closed_on or {}).get(sym, day)
        if after >= through:
            continue
        for paid in source.dividends(sym, after, through):
            ex_date, amount = str(paid.ex_date), paid.per_share
            if not (len(ex_date) == 10 and after < ex_date <= through):
                raise ValueError(f"dividend of {sym}: ex-date {ex_date!r} is not an ISO date in ({after}, {through}]")
            if not isinstance(amount, (int, float)) or isinstance(amount, bool) or not amount > 0:
                raise ValueError(f"dividend of {sym} on {ex_date}: cash amount {amount!r} is not a positive number")
            credits.append(
                DividendCredit(
                    symbol=sym,
                    ex_date=ex_date,
                    per_share=float(amount),
                    quantity=pos.quantity,
                    amount=round(pos.quantity * float(amount), 6),
                )
            )
    return sorted(credits, key=lambda c: (c.ex_date, c.symbol))


def credit_dividends(portfolio: PortfolioSnapshot, credits: Sequence[DividendCredit], day: str) -> PortfolioSnapshot:
    """The book with the credits paid into cash and every position marked as credited through `day`."""
    positions = {s: p.model_copy(update={"dividends_through": day}) for s, p in portfolio.positions.items()}
    cash = portfolio.cash + sum(c.amount for c in credits)
    return portfolio.model_copy(update={"cash": round(cash, 6), "positions": positions})
