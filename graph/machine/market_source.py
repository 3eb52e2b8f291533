"""Where SCANNING reads the market: today's data (`LiveMarket`) or a recording (`RecordedMarket`, which replay
installs). The node asks the same four questions of either and never asks which it has.

Live: the as-of date is checked against the data, bundles are computed from it, held positions are paid the
dividends whose ex-date came and closed on the levels the bars since their last check reached (committed through
the execution backend after the audit barrier), and held symbols outside the universe are marked at their last
price. Recorded: the recording is the truth (today's files may be gone or changed): its bundles, its settled book,
its marks; nothing is committed (a replay's execution backend writes nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig

from agent.audit_events import emit
from agent.data.market import validate_as_of
from agent.dividends import credit_dividends, due_dividends
from agent.exits import apply_exits, due_exits
from agent.features.bundle import build_bundle, round_value
from agent.markets import bar_cutoff, fill_field
from schemas.features import FeatureBundle
from schemas.market import Untradable
from schemas.memory import ClosedTrade
from schemas.portfolio import DividendCredit, PortfolioSnapshot

# graph/machine/cycle_context.py's CycleServices and CycleContext, which hold a MarketSource: named here, not
# imported (that module imports this one)
CycleServices = Any
CycleContext = Any

# what settling before the decision leaves: the positions closed, the dividends credited, the book after them, and
# the state update (the portfolio's new version, when one was committed)
Settled = tuple[list[ClosedTrade], list[DividendCredit], PortfolioSnapshot, dict[str, Any]]


class MarketSource(Protocol):
    def check_as_of(self, rt: CycleServices, symbols: list[str], as_of: str) -> None:
        """Raise (DataError, NotATradingDayError) when a symbol has no bar dated as_of to decide at."""

    def bundle(self, rt: CycleServices, symbol: str, as_of: str) -> FeatureBundle: ...

    def settle(
        self, context: CycleContext, state: dict[str, Any], portfolio: PortfolioSnapshot, config: RunnableConfig
    ) -> Settled:
        """Dividends and exits due before the decision, and the book after them."""

    def marks(
        self, rt: CycleServices, state: dict[str, Any], portfolio: PortfolioSnapshot, symbols: list[str], as_of: str
    ) -> tuple[dict[str, float], list[Untradable]]:
        """Prices of held symbols outside the universe, and what cannot trade today with its reason."""


class LiveMarket:
    def check_as_of(self, rt: CycleServices, symbols: list[str], as_of: str) -> None:
        # every symbol has a bar dated as_of: at the close its close, at the open its open is the price
        validate_as_of(rt.market, symbols, as_of, rt.profile)

    def bundle(self, rt: CycleServices, symbol: str, as_of: str) -> FeatureBundle:
        return build_bundle(
            symbol,
            as_of,
            market=rt.market,
            news=rt.news,
            fundamentals=rt.fundamentals,
            cache=rt.cache,
            profile=rt.profile,
            window=rt.config.input_window,
        )

    def settle(
        self, context: CycleContext, state: dict[str, Any], portfolio: PortfolioSnapshot, config: RunnableConfig
    ) -> Settled:
        """Dividends and exits are cash and fills: audited first (the durability barrier), then committed together
        through the execution backend against the portfolio version this cycle read; the rest of the cycle sees
        the book after them. Exits read the bars a decision may read whole (through the bar cutoff); a position is
        paid the ex-dates through its exit's date."""
        rt = context.services
        day, profile = state["as_of"], rt.profile
        through = bar_cutoff(profile, day)
        known = set(rt.market.universe())
        bars = {
            s: rt.market.bars(s, p.checked_through or p.opened, through)
            for s, p in portfolio.positions.items()
            if s in known
        }
        triggers, checked = due_exits(portfolio, bars, str(through.date()))
        credits: list[DividendCredit] = []
        if rt.actions is not None:
            credits = due_dividends(checked, rt.actions, day, {t.symbol: t.date for t in triggers})
            checked = credit_dividends(checked, credits, day)
        if not triggers and not credits:
            return [], [], checked, {}
        closed, trades, after = apply_exits(
            checked, triggers, profile=profile, fees_bps=rt.config.fees_bps, slippage_bps=rt.config.slippage_bps
        )
        if rt.execution is None:
            raise ValueError(
                f"{len(closed)} exit(s) and {len(credits)} dividend(s) to settle "
                f"({', '.join(sorted({*(c.symbol for c in closed), *(c.symbol for c in credits)}))}) "
                f"but no execution backend "
                f"is wired to commit them"
            )
        context.audit_barrier()
        version = rt.execution.settle_exits(
            state["cycle_id"],
            state["session_id"],
            closed=closed,
            trades=trades,
            portfolio_after=after,
            base_version=state.get("portfolio_version"),
            dividends=credits,
        )
        for d in credits:
            emit(
                "dividend_paid",
                {
                    "symbol": d.symbol,
                    "date": d.ex_date,
                    "per_share": d.per_share,
                    "quantity": d.quantity,
                    "amount": d.amount,
                },
                config,
            )
        for c in closed:
            emit(
                "position_exited",
                {
                    "symbol": c.symbol,
                    "reason": c.reason,
                    "date": c.closed,
                    "price": c.exit_price,
                    "realized_pnl": c.realized_pnl,
                },
                config,
            )
        return closed, credits, after, ({"portfolio_version": version} if version is not None else {})

    def marks(
        self, rt: CycleServices, state: dict[str, Any], portfolio: PortfolioSnapshot, symbols: list[str], as_of: str
    ) -> tuple[dict[str, float], list[Untradable]]:
        """Held symbols the cycle does not trade still count in equity and exposure, at the last price the decision
        may know: at the close the last close through as_of; at the open as_of's opening price, or the last close
        before it when as_of has no bar. One with no bar on as_of cannot trade today and is listed as untradable
        with its reason; one with no price at all fails the cycle closed rather than being valued at cost. A
        backtest's listed tickers left out today are untradable too, held or not."""
        marks: dict[str, float] = {}
        untradable: list[Untradable] = []
        profile = rt.profile
        for sym in sorted(set(portfolio.positions) - set(symbols)):
            bars = rt.market.as_of(sym, as_of, lookback=1) if sym in rt.market.universe() else None
            if bars is None or bars.empty:
                raise ValueError(f"held position {sym} has no price on or before {as_of}: cannot value the book")
            dated, bar = bars.index[-1].strftime("%Y-%m-%d"), bars.iloc[-1]
            price = round_value(float(bar[fill_field(profile)] if dated == as_of else bar["close"]))
            if price is None:  # NaN: no price at all
                raise ValueError(f"held position {sym} has no price on {dated}: cannot value the book")
            marks[sym] = price
            if dated == as_of:
                continue
            untradable.append(
                Untradable(
                    symbol=sym,
                    reason=f"no {sym} bar on {as_of}: it cannot trade today; "
                    f"valued at its last close {marks[sym]} of {dated}",
                    price=marks[sym],
                    price_date=dated,
                )
            )
        held = {u.symbol for u in untradable}
        untradable += [
            Untradable(symbol=s, reason=why)
            for s, why in sorted(((state.get("case") or {}).get("untradable") or {}).items())
            if s not in held
        ]
        return marks, untradable


class RecordedMarket:
    """A recording's SCANNING: its MarketScan contract (`scan`) and its bundles (`bundles(symbol, as_of)`)."""

    def __init__(self, scan: dict[str, Any], bundles: Callable[[str, str], FeatureBundle]):
        self.scan, self.bundles = scan, bundles

    def check_as_of(self, rt: CycleServices, symbols: list[str], as_of: str) -> None:
        return None  # the recording's data is the truth: no re-validation against today's files

    def bundle(self, rt: CycleServices, symbol: str, as_of: str) -> FeatureBundle:
        return self.bundles(symbol, as_of)

    def settle(
        self, context: CycleContext, state: dict[str, Any], portfolio: PortfolioSnapshot, config: RunnableConfig
    ) -> Settled:
        return (
            [ClosedTrade.model_validate(e) for e in self.scan.get("exits") or []],
            [DividendCredit.model_validate(d) for d in self.scan.get("dividends") or []],
            PortfolioSnapshot.model_validate(self.scan["portfolio"]),
            {},
        )

    def marks(
        self, rt: CycleServices, state: dict[str, Any], portfolio: PortfolioSnapshot, symbols: list[str], as_of: str
    ) -> tuple[dict[str, float], list[Untradable]]:
        return (
            dict(self.scan.get("marks") or {}),
            [Untradable.model_validate(u) for u in self.scan.get("untradable") or []],
        )
