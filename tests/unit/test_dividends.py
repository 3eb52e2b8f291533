"""Cash dividends as the data states them (split-adjusted, not dividend-adjusted bars): a held position is paid
`shares × cash_amount` on the ex-date, before that day's decision, once; audited, committed through the execution
backend (the stored book, a backtest's simulation), in the scan contract, and replayed from the recording."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from agent.config import AgentConfig, RiskLimits
from agent.data.market import default_market_data
from agent.dividends import credit_dividends, due_dividends
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.backtest.loop import load_logs, run_backtest
from graph.services.portfolio_view import portfolio_view
from graph.services.replay.session import verify_session
from schemas.portfolio import PortfolioSnapshot, Position
from schemas.simulation import EpisodeConfig
from tests.helpers import mock_store


class Paid(NamedTuple):
    ex_date: str
    per_share: float


class Dividends:
    """A corporate-actions source in memory: each dividend with its ex-date in (after, through]."""

    def __init__(self, table: dict[str, list[tuple[str, float]]]):
        self.table = table

    def dividends(self, symbol: str, after: str, through: str) -> list[Paid]:
        return [Paid(d, a) for d, a in self.table.get(symbol, []) if after < d <= through]


@pytest.fixture
def mstore():
    return mock_store()


def _book(**positions) -> PortfolioSnapshot:
    return PortfolioSnapshot(
        cash=1_000.0, positions={s: Position(symbol=s, avg_price=10.0, **kw) for s, kw in positions.items()}
    )


def test_what_is_owed_and_to_whom():
    src = Dividends(
        {"A": [("2025-03-03", 0.5), ("2025-03-10", 0.5)], "B": [("2025-03-10", 1.0)], "C": [("2025-03-10", 2.0)]}
    )
    book = _book(
        A=dict(quantity=10, opened="2025-02-20"),  # held into both ex-dates
        B=dict(quantity=4, opened="2025-03-10"),  # bought on the ex-date: no claim
        C=dict(quantity=3, opened="2025-02-20", dividends_through="2025-03-10"),
    )  # already paid
    credits = due_dividends(book, src, "2025-03-10")
    assert [(c.symbol, c.ex_date, c.amount) for c in credits] == [("A", "2025-03-03", 5.0), ("A", "2025-03-10", 5.0)]
    paid = credit_dividends(book, credits, "2025-03-10")
    assert paid.cash == 1_010.0 and {p.dividends_through for p in paid.positions.values()} == {"2025-03-10"}
    assert due_dividends(paid, src, "2025-03-10") == []  # never twice
    # a position that closed on its stop on 03-05 is paid the ex-dates through that day only
    assert [c.ex_date for c in due_dividends(book, src, "2025-03-10", {"A": "2025-03-05"})] == ["2025-03-03"]
    with pytest.raises(ValueError, match="cash amount -1"):
        due_dividends(book, Dividends({"A": [("2025-03-03", -1)]}), "2025-03-10")
    with pytest.raises(ValueError, match="not an ISO date in"):
        due_dividends(
            book, type("Bad", (), {"dividends": lambda self, s, a, t: [Paid("2025-04-01", 1.0)]})(), "2025-03-10"
        )


@pytest.mark.parametrize("decide_at", ["open", "close"])
def test_a_dividend_is_credited_once_on_its_ex_date_and_replayed(mstore, decide_at):
    src = Dividends({"AAPL": [("2012-03-06", 0.5)], "MSFT": [("2012-03-07", 0.2)]})
    rt = default_services(AgentConfig(decide_at=decide_at, risk=RiskLimits(max_positions=2)), actions=src)
    session = f"div-{decide_at}"
    # the starting cash (100,000) less 100 AAPL bought at 60 without fees, so the book's P&L identity holds
    seeded = PortfolioSnapshot(
        cash=94_000.0, positions={"AAPL": Position(symbol="AAPL", quantity=100, avg_price=60.0, opened="2012-03-01")}
    )
    mstore.portfolios.save(session, seeded, "seed")
    outs = [
        run_state_machine(["AAPL", "MSFT"], day, store=mstore, session_id=session, services=rt)
        for day in ("2012-03-05", "2012-03-06", "2012-03-07")
    ]
    assert [o.status for o in outs] == ["completed"] * 3, [o.error for o in outs]
    scans = [o.contracts["SCANNING"] for o in outs]
    assert "dividends" not in scans[0]
    assert scans[1]["dividends"] == [
        {"symbol": "AAPL", "ex_date": "2012-03-06", "per_share": 0.5, "quantity": 100.0, "amount": 50.0}
    ]
    before = outs[0].contracts["EXECUTING"]["portfolio_after"]["cash"]
    assert scans[1]["portfolio"]["cash"] == pytest.approx(before + 50.0)  # paid before the decision
    # the next cycle pays AAPL nothing again; MSFT, bought by the first cycle's decision, is paid its ex-date
    bought = outs[0].contracts["EXECUTING"]["result"]["executed_trades"]
    assert [t["symbol"] for t in bought] == ["MSFT"], "the offline agent buys MSFT on the first day"
    assert [(d["symbol"], d["amount"]) for d in scans[2]["dividends"]] == [
        ("MSFT", round(bought[0]["quantity"] * 0.2, 6))
    ]
    credited = [e["payload"] for e in mstore.events.read(session, kind="dividend_paid")]
    assert [(c["symbol"], c["date"], c["amount"]) for c in credited if c["symbol"] == "AAPL"] == [
        ("AAPL", "2012-03-06", 50.0)
    ]
    entry = mstore.executions.get(f"{outs[1].cycle_id}:exits")
    assert entry["kind"] == "exits" and entry["dividends"][0]["amount"] == 50.0
    # the book's P&L counts the dividend as realised income: realised + unrealised = equity - starting cash
    view = portfolio_view(mstore, session, default_market_data())
    assert view.realized_pnl + view.unrealized_pnl == pytest.approx(view.total_pnl, abs=1e-6)
    report = verify_session(mstore, session)
    assert report.identical, [(c.cycle_id, [(d.state, d.path) for d in c.divergences]) for c in report.cycles]


def test_a_backtest_is_paid_on_the_ex_date_not_after_an_exit_nor_on_a_buy_that_day(tmp_path, mstore):
    """Decision points every 5 sessions at the open. The offline agent holds AAPL from 2011-01-25 to its horizon
    exit at the close of 02-07 and buys it again at the open of 02-08: paid for 02-01, not for 02-08."""
    src = Dividends({"AAPL": [("2011-02-01", 0.25), ("2011-02-08", 0.25)]})
    cfg = EpisodeConfig(
        episode_id="div",
        tickers=["AAPL", "MSFT"],
        initial_cash=100_000.0,
        start="2011-01-03",
        end="2011-02-28",
        every=5,
        bars_in_case=5,
        decide_at="open",
    )
    rt = default_services(AgentConfig(risk=RiskLimits(max_notional_pct=60.0, exposure_cap_pct=100.0)), actions=src)
    res = run_backtest(cfg, mstore, progress=False, services=rt, out_dir=tmp_path, run_id="div")
    logs = {lg.date: lg for lg in load_logs(tmp_path / "div" / "episode_log.jsonl")}
    trades = [(t.date, t.side, t.reason) for t in res.trade_history.trades if t.symbol == "AAPL"]
    assert (
        ("2011-01-25", "BUY", None) in trades
        and ("2011-02-07", "SELL", "horizon") in trades
        and ("2011-02-08", "BUY", None) in trades
    ), trades  # the holding the test is about
    held = logs["2011-02-01"].portfolio_before.positions["AAPL"].quantity
    paid = [(d, lg.dividends) for d, lg in logs.items() if lg.dividends]
    assert [(d, [(c.ex_date, c.amount) for c in cs]) for d, cs in paid] == [
        ("2011-02-01", [("2011-02-01", round(held * 0.25, 6))])
    ]
    lg = logs["2011-02-01"]  # the cash moved by the dividend, besides the point's exits and fills
    flows = sum(
        (t.notional - t.fees) if t.side == "SELL" else -(t.notional + t.fees)
        for t in lg.exits + lg.execution_result.executed_trades
    )
    assert lg.portfolio_after.cash == pytest.approx(lg.portfolio_before.cash + held * 0.25 + flows, abs=1e-5)
