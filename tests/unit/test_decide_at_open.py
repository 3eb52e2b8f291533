"""Deciding at the open (StockBench's protocol), end to end: a cycle dated D reads the bars through D-1 and D's
opening price only, fills at that open, sees news published before 09:30 New York time, replays identical; a
backtest at the open trades and marks at opens."""

from __future__ import annotations

import json

import pytest

from agent.config import AgentConfig, RiskLimits
from agent.data.market import default_market_data
from agent.data.news import NewsSource
from agent.features.bundle import round_value
from agent.metrics import buy_and_hold_curve
from agent.tools import ToolContext, get_indicators, get_market_snapshot, get_price_history, with_context
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.backtest.loop import load_logs, run_backtest
from graph.services.replay.lookahead import audit_events
from graph.services.replay.session import verify_session
from schemas.simulation import EpisodeConfig
from tests.helpers import mock_store

DAY, BEFORE = "2012-03-05", "2012-03-02"  # a Monday and the Friday before (EST: New York is UTC-5)
SYMBOLS = ["AAPL", "MSFT"]
RISK = RiskLimits(max_notional_pct=60.0, exposure_cap_pct=100.0)


@pytest.fixture
def mstore():
    return mock_store()


def _bar(symbol: str, day: str):
    return default_market_data().bars(symbol, day, day).iloc[0]


def _unknown_numbers(day: str) -> dict[str, float]:
    """D's close, high, low and volume as a bundle would print them: none may reach a decision at D's open."""
    out = {}
    for s in SYMBOLS:
        bar = _bar(s, day)
        for field in ("close", "high", "low"):
            out[f"{s}.{field}"] = round_value(float(bar[field]))
        out[f"{s}.volume"] = float(round(bar["volume"]))
    return out


def _numbers_in(obj) -> set[float]:
    found = set()

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            found.add(float(x))

    walk(obj)
    return found


def _open_services(**kw):
    return default_services(AgentConfig(decide_at="open", risk=RISK), **kw)


def test_an_open_cycle_never_reads_its_own_bar_but_the_open_and_fills_there(mstore):
    out = run_state_machine(SYMBOLS, DAY, store=mstore, services=_open_services())
    assert out.status == "completed", out.error
    scan = out.contracts["SCANNING"]
    for snap in scan["snapshots"]:
        s, b = snap["symbol"], snap["bundle"]
        prev, today = _bar(s, BEFORE), _bar(s, DAY)
        assert b["history"][-1]["date"] == BEFORE and all(h["date"] < DAY for h in b["history"])
        assert b["technical"]["close"] == round_value(float(prev["close"]))  # technical.close = D-1's close
        assert snap["price"] == b["open_price"] == round_value(float(today["open"]))
        assert snap["prev_close"] == round_value(float(prev["close"])) and snap["last_bar_date"] == BEFORE
    unknown = _unknown_numbers(DAY)
    events = mstore.events.read(out.session_id)
    tool_answers = [e["payload"]["result"] for e in events if e["kind"] == "tool_result"]
    assert tool_answers, "the scan reads through the tools: their answers are audited"
    for where, obj in [("scan", scan), *[(f"tool answer {i}", a) for i, a in enumerate(tool_answers)]]:
        leaked = {k: v for k, v in unknown.items() if v in _numbers_in(obj)}
        assert not leaked, f"{where} carries D's {leaked}"
    # the recording holds no bar, headline or filing known only after the decision (the look-ahead audit agrees)
    audit = audit_events(events)
    assert audit[0].decide_at == "open" and not audit[0].leaks and audit[0].checked["bar"] > 0
    # every fill of the decision is at D's open, plus slippage
    trades = out.contracts["EXECUTING"]["result"]["executed_trades"]
    assert trades, "the relaxed limits let the offline agent buy"
    for t in trades:
        opened = round_value(float(_bar(t["symbol"], DAY)["open"]))  # bundles carry prices at a fixed precision
        assert t["date"] == DAY and t["price"] == pytest.approx(opened * (1 + 2e-4), abs=1e-6)
    manifest = mstore.events.read(out.session_id, kind="manifest")[0]["payload"]
    assert manifest["config"]["decide_at"] == manifest["market_profile"]["decide_at"] == "open"


def test_tools_answer_from_the_bars_a_decision_at_the_open_may_read():
    rt = _open_services()
    ctx = ToolContext(as_of=DAY, universe=SYMBOLS, portfolio=_empty_book(), bundle_factory=lambda s: rt.bundle(s, DAY))
    history = get_price_history.invoke(with_context({"symbol": "AAPL", "lookback": 20}, ctx))
    assert history[-1]["date"] == BEFORE and len(history) == 20
    close = get_indicators.invoke(with_context({"symbol": "AAPL", "names": ["close", "volume"]}, ctx))
    assert close == {
        "close": round_value(float(_bar("AAPL", BEFORE)["close"])),
        "volume": float(round(_bar("AAPL", BEFORE)["volume"])),
    }
    row = get_market_snapshot.invoke(with_context({"symbols": ["AAPL"]}, ctx))[0]
    assert row["open"] == round_value(float(_bar("AAPL", DAY)["open"])) and row["close"] == close["close"]
    # the same tools at the close read D's whole bar (the check above could fail)
    at_close = default_services(AgentConfig())
    ctx = ToolContext(
        as_of=DAY, universe=SYMBOLS, portfolio=_empty_book(), bundle_factory=lambda s: at_close.bundle(s, DAY)
    )
    assert get_price_history.invoke(with_context({"symbol": "AAPL", "lookback": 1}, ctx))[-1]["date"] == DAY
    assert "open" not in get_market_snapshot.invoke(with_context({"symbols": ["AAPL"]}, ctx))[0]


def _empty_book():
    from schemas.portfolio import PortfolioSnapshot

    return PortfolioSnapshot(cash=100_000.0)


def test_news_at_0929_new_york_is_known_at_the_open_0931_is_not(mstore):
    # 2012-03-05 is before the DST switch: 09:29 New York = 14:29 UTC
    items = [
        {"symbol": "AAPL", "published_at": "2012-03-05T14:29:00Z", "headline": "Apple early item", "source": "wire"},
        {"symbol": "AAPL", "published_at": "2012-03-05T14:31:00Z", "headline": "Apple late item", "source": "wire"},
        {
            "symbol": "AAPL",
            "published_at": "2012-03-05T09:31:00-05:00",
            "headline": "Apple late item, NY stamp",
            "source": "wire",
        },
    ]
    news = NewsSource(items, source="test-news")
    out = run_state_machine(["AAPL"], DAY, store=mstore, services=_open_services(news=news))
    assert out.status == "completed", out.error
    seen = [i["headline"] for i in out.contracts["SCANNING"]["snapshots"][0]["bundle"]["news"]["items"]]
    assert seen == ["Apple early item"]
    prompts = json.dumps([e["payload"] for e in mstore.events.read(out.session_id, kind="llm_request")])
    assert "Apple early item" in prompts and "Apple late item" not in prompts
    # at the close of the same day all three were published before the decision
    closed = run_state_machine(
        ["AAPL"], DAY, store=mstore, services=default_services(AgentConfig(risk=RISK), news=news)
    )
    assert len(closed.contracts["SCANNING"]["snapshots"][0]["bundle"]["news"]["items"]) == 3


def test_replay_verify_of_an_open_session_is_identical(mstore, monkeypatch):
    out = run_state_machine(SYMBOLS, DAY, store=mstore, services=_open_services())
    again = run_state_machine(SYMBOLS, "2012-03-06", store=mstore, session_id=out.session_id, services=_open_services())
    assert again.status == "completed", again.error
    # today's environment decides at the close: the replay runs with the recorded decision time regardless
    monkeypatch.setenv("TRADEGRAPH_DECIDE_AT", "close")
    report = verify_session(mstore, out.session_id)
    assert report.identical, [(v.cycle_id, [(d.state, d.path) for d in v.divergences]) for v in report.cycles]
    # ... and says where today differs, never counting it as a divergence
    assert len(report.cycles) == 2
    for v in report.cycles:
        assert "decide_at: recorded 'open', now 'close'" in " | ".join(v.config_differences)


def test_a_backtest_at_the_open_trades_and_marks_at_opens(tmp_path, mstore):
    cfg = EpisodeConfig(
        episode_id="open",
        tickers=SYMBOLS,
        initial_cash=100_000.0,
        start="2011-01-03",
        end="2011-02-28",
        every=5,
        bars_in_case=5,
        decide_at="open",
    )
    res = run_backtest(
        cfg, mstore, progress=False, services=default_services(AgentConfig(risk=RISK)), out_dir=tmp_path, run_id="open"
    )
    logs = load_logs(tmp_path / "open" / "episode_log.jsonl")
    assert res.decision_points == len(logs) >= 8 and res.cycle_statuses == {"completed": len(logs)}
    for lg in logs:
        opens = {s: float(_bar(s, lg.date)["open"]) for s in SYMBOLS}
        assert lg.prices == opens  # marked at the open, after the point's trades
        book = lg.portfolio_after
        assert lg.equity == pytest.approx(book.cash + sum(p.quantity * opens[s] for s, p in book.positions.items()))
        for t in lg.execution_result.executed_trades:
            slip = 1 + 2e-4 if t.side == "BUY" else 1 - 2e-4
            assert t.date == lg.date and t.price == pytest.approx(round_value(opens[t.symbol]) * slip, abs=1e-6)
    decided = [t for lg in logs for t in lg.execution_result.executed_trades]
    assert len(decided) >= 2
    # the benchmark is bought and marked on the same opens
    curve = buy_and_hold_curve({s: [lg.prices[s] for lg in logs] for s in SYMBOLS}, cfg.initial_cash)
    assert [p.equity for p in res.benchmark_curve] == pytest.approx(curve)
    assert res.benchmark["bought_at"].startswith("the first decision point's open")
    # the Case each cycle got: bars through the session before, the current price the day's open
    for e in mstore.events.read("bt-open", kind="manifest"):
        case, day = e["payload"]["inputs"]["case"], e["payload"]["inputs"]["as_of"]
        for s, sd in case["stock_data"].items():
            assert sd["daily_bars"][-1]["timestamp"] < day
            assert sd["current_price"] == float(_bar(s, day)["open"])


def test_a_held_symbol_outside_the_cycle_is_marked_at_the_open_at_the_open(mstore):
    from schemas.portfolio import PortfolioSnapshot, Position

    held = PortfolioSnapshot(
        cash=90_000.0, positions={"IBM": Position(symbol="IBM", quantity=10, avg_price=150.0, opened="2012-02-01")}
    )
    for decide_at, field in (("open", "open"), ("close", "close")):
        session = f"marks-{decide_at}"
        mstore.portfolios.save(session, held, "seed")
        out = run_state_machine(
            ["AAPL"], DAY, store=mstore, session_id=session, services=default_services(AgentConfig(decide_at=decide_at))
        )
        assert out.contracts["SCANNING"]["marks"] == {"IBM": round_value(float(_bar("IBM", DAY)[field]))}
        assert "untradable" not in out.contracts["SCANNING"]  # IBM has a bar that day
