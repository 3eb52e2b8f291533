"""Portfolio state: cash and long positions (the paper broker is long-only)."""

from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, IsoDate, NonNegMoney, Price, Symbol, unset


class Position(Contract):
    symbol: Symbol
    quantity: float = Field(gt=0, lt=1e10)
    avg_price: Price
    # date of the last buy; the cn_a_share profile needs it for T+1
    opened: IsoDate | None = None
    # the thesis it was opened on: each later bar is checked against these levels (agent/exits.py)
    stop: Price | None = None
    target: Price | None = None
    horizon_sessions: int | None = Field(default=None, ge=1, le=260)
    # bars checked against the levels so far, and the last of them: the horizon exit counts the data's own bars
    sessions_held: int = Field(default=0, ge=0)
    checked_through: IsoDate | None = None
    # the decision day through which its cash dividends were credited (agent/dividends.py); unset (and not
    # written) until a corporate-actions source first checks it, so a book without one reads as before
    dividends_through: IsoDate | None = Field(default=None, exclude_if=unset)
    conviction: float | None = Field(default=None, ge=0, le=1)
    setup: list[str] = Field(default_factory=list, max_length=20)


class DividendCredit(Contract):
    """A cash dividend paid into the book on its ex-date: `quantity` shares held into that day, `per_share` each.
    The bars are split-adjusted and not dividend-adjusted, so this cash is the dividend's only trace."""

    symbol: Symbol
    ex_date: IsoDate
    per_share: Price
    quantity: float = Field(gt=0, lt=1e10)
    amount: NonNegMoney


class PortfolioSnapshot(Contract):
    cash: NonNegMoney
    positions: dict[Symbol, Position] = Field(default_factory=dict)
    as_of: IsoDate | None = None
    # realised P&L of the current day; the daily loss cap reads it
    realized_pnl_today: float = 0.0

    def quantity(self, symbol: str) -> float:
        pos = self.positions.get(symbol)
        return pos.quantity if pos else 0.0


class PositionView(Contract):
    """One open position valued at the view's date: what a trader reads, derived from the stored snapshot."""

    symbol: Symbol
    quantity: float
    avg_price: float
    price: float | None = Field(description="close at the view's date; None when the data has no bar for it")
    price_date: IsoDate | None = None
    market_value: float | None = None
    unrealized_pnl: float | None = None
    unrealized_pct: float | None = None
    stop: float | None = None
    target: float | None = None
    opened: IsoDate | None = None
    age_sessions: int = Field(description="bars held so far (the horizon exit counts these)")
    horizon_sessions: int | None = None


class PortfolioView(Contract):
    """A session's book at its last as-of: cash, positions, equity and P&L. realized + unrealized = equity −
    starting cash, fees included (realized carries every fee paid)."""

    session_id: str
    as_of: IsoDate | None
    version: int = Field(description="the stored portfolio's version (one per committed fill)")
    starting_cash: float
    cash: float
    positions: list[PositionView]
    equity: float | None = Field(description="cash + market value; None when a position has no price")
    realized_pnl: float
    unrealized_pnl: float | None
    total_pnl: float | None
    fees_paid: float
    fills: int = Field(description="trades committed in the session (entries, exits and signal sells)")
