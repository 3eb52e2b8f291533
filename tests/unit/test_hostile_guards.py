"""Guards against what a real model sends and the offline model never does: a plan naming an asset
twice, a rebuttal about another ticker, a quant citing a rounded (or an invented) number, and a panel
where nobody takes a side. Each answer is scripted; the code under test is the real cycle. Then the rules of
the text guards (agent/guards.py) one by one; on StockBench's real headlines in test_stockbench_news.py."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from agent.config import RiskLimits
from agent.guards import GuardError, Shown, check_figures, check_symbol, figures, mentions
from agent.prompts import render_evidence
from agent.risk import RiskInput, RiskOrder, evaluate
from graph.machine.runner import run_state_machine
from schemas.analysis import AnalystNote
from schemas.plan import Plan
from schemas.portfolio import PortfolioSnapshot, Position
from tests.helpers import events_of, mock_store, services_with

PLAN = {
    "objective": "decide",
    "quant_question": "trend?",
    "timeframes": ["1d"],
    "constraints": {},
    "expected_outputs": ["thesis"],
}


def test_a_plan_naming_an_asset_twice_is_repaired_never_doubled():
    store = mock_store()
    dup = json.dumps({**PLAN, "assets": ["AAPL", "AAPL"]})
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with({"Plan": [dup]}))
    refused = [
        e
        for e in events_of(store, out, "validation")
        if e["payload"].get("schema") == "Plan" and not e["payload"]["ok"]
    ]
    assert len(refused) == 1 and "repeated: AAPL" in refused[0]["payload"]["error"]
    assert out.status == "completed"
    buys = [o["symbol"] for o in out.contracts["DECIDING"]["orders"] if o["side"] == "BUY"]
    assert len(buys) == len(set(buys))
    with pytest.raises(ValueError, match="repeated"):
        Plan(**PLAN, assets=["AAPL", "AAPL"])


def test_two_orders_for_one_symbol_cannot_pass_the_position_cap():
    limits = RiskLimits(max_notional_pct=25.0, daily_loss_cap_pct=9.0, max_positions=5)
    half = RiskOrder("AAPL", "BUY", 180, "LONG", 100.0, 98.0, 104.0)  # 18% of equity each, 36% together
    v = evaluate(RiskInput((half, half), PortfolioSnapshot(cash=100_000.0), {"AAPL": 100.0}), limits)
    assert not v.passed and any(r.startswith("max_notional_pct AAPL") and "36.0000%" in r for r in v.reasons)
    # and a position already held counts toward the cap of a new buy of the same symbol
    held = PortfolioSnapshot(cash=82_000.0, positions={"AAPL": Position(symbol="AAPL", quantity=180, avg_price=100.0)})
    v = evaluate(RiskInput((half,), held, {"AAPL": 100.0}), limits)
    assert not v.passed and any("36.0000%" in r for r in v.reasons)


def test_the_cap_message_says_exceeds_when_rounding_would_hide_it():
    limits = RiskLimits(max_notional_pct=25.0, daily_loss_cap_pct=9.0)
    o = RiskOrder("AAPL", "BUY", 250.0052, "LONG", 100.0, 98.0, 104.0)
    v = evaluate(RiskInput((o,), PortfolioSnapshot(cash=100_000.0), {"AAPL": 100.0}), limits)
    reason = next(r for r in v.reasons if r.startswith("max_notional_pct"))
    assert "25.0005%" in reason and "exceeds" in reason


def test_a_rebuttal_about_another_ticker_fails_the_debate_at_once():
    store = mock_store()
    case = {"supporting_points": [], "risks": [], "argument": "a case"}
    script = {
        "DebateCase": [
            json.dumps({**case, "symbol": "AAPL", "side": "bull"}),
            json.dumps({**case, "symbol": "AAPL", "side": "bear"}),
            json.dumps({**case, "symbol": "MSFT", "side": "bull"}),
        ]
    }
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with(script))
    assert out.status == "failed" and out.error["state"] == "DEBATE" and out.error["type"] == "TickerGuardError"
    assert "EXECUTING" not in out.contracts and store.executions.get(out.cycle_id) is None


def test_a_rounded_citation_passes_and_an_invented_one_still_fails():
    store = mock_store()
    first = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    rsi = first.contracts["SCANNING"]["snapshots"][0]["bundle"]["technical"]["rsi14"]
    answer = {"symbol": "AAPL", "question": "q", "answer": "a"}
    rounded = json.dumps({**answer, "metrics": {"rsi14": round(rsi, 2)}})
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with({"QuantAnswer": [rounded]}))
    assert out.status == "completed" and out.contracts["ANALYZING"]["panels"][0]["quant"]["metrics"] == {
        "rsi14": round(rsi, 2)
    }
    invented = json.dumps({**answer, "metrics": {"rsi14": round(rsi + 3, 2)}})
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with({"QuantAnswer": [invented] * 3}))
    # isolated like an analyst: the quant's answer is lost for this symbol, the cycle goes on
    assert out.status == "completed" and out.contracts["ANALYZING"]["panels"][0]["quant"] is None
    assert any(e["payload"].get("type") == "quant_failed" for e in events_of(store, out, "error"))


def test_when_nobody_takes_a_side_there_is_no_winner_and_no_debate_call():
    store = mock_store()
    out = run_state_machine("FB", "2012-06-01", store=store, services=services_with())  # FB listed 10 sessions before
    notes = out.contracts["ANALYZING"]["panels"][0]["notes"]
    assert all(n["model_used"] == "deterministic-abstain" or abs(n["stance"]) <= 0.05 for n in notes)
    result = out.contracts["DEBATE"]["results"][0]
    assert result["winner"] == "NONE" and result["conviction"] == 0
    assert out.contracts["DECIDING"]["orders"] == [] and out.contracts["DECIDING"]["theses"] == []
    assert not [e for e in events_of(store, out, "llm_request") if e["state"] == "DEBATE"]


def test_yesterdays_loss_does_not_count_against_todays_cap():
    limits = RiskLimits(daily_loss_cap_pct=2.0, max_notional_pct=50.0)
    o = RiskOrder("AAPL", "BUY", 400, "LONG", 50.0, 48.0, 54.0)  # 800 at risk
    book = PortfolioSnapshot(cash=100_000.0, as_of="2012-06-01", realized_pnl_today=-1_500.0)
    today = evaluate(RiskInput((o,), book, {"AAPL": 50.0}, as_of="2012-06-01"), limits)
    assert not today.passed  # 800 + 1,500 > 2,000 on the day the loss was realised
    tomorrow = evaluate(RiskInput((o,), book, {"AAPL": 50.0}, as_of="2012-06-04"), limits)
    assert tomorrow.passed


def test_a_position_outside_the_cycle_is_valued_at_market_not_cost():
    store = mock_store()
    first = run_state_machine("IBM", "2012-06-01", store=store, services=services_with())
    sid = first.session_id
    # an IBM position bought long ago at 10: its value is what it fetches on the day
    book = PortfolioSnapshot(cash=50_000.0, positions={"IBM": Position(symbol="IBM", quantity=100, avg_price=10.0)})
    store.portfolios.save(sid, book, "seed")
    out = run_state_machine("AAPL", "2012-06-04", store=store, session_id=sid, services=services_with())
    mark = out.contracts["SCANNING"]["marks"]["IBM"]
    assert mark > 150  # IBM traded near 190 in June 2012, nowhere near its cost of 10
    checks = out.contracts["VALIDATING"]["checks"]
    exposure = next((c for c in checks if c["name"] == "exposure_cap"), None)
    if exposure is not None:
        assert exposure["value"] >= 100 * mark / (50_000 + 100 * mark) * 100 - 1e-6


def test_cn_a_share_orders_come_in_lots_of_100():
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(market="cn_a_share"))
    buys = [o for o in out.contracts["DECIDING"]["orders"] if o["side"] == "BUY"]
    assert buys and all(o["quantity"] % 100 == 0 for o in buys)
    assert out.contracts["VALIDATING"]["passed"] and out.contracts["EXECUTING"]["status"] == "filled"


# ---------------------------------------------------------------- the rules of agent/guards.py, one by one
UNIVERSE = ("AAPL", "MSFT", "GS", "V", "BRK.B")
HEADLINE = "These 2 Tech Titans Generate Substantial Cash: MSFT & AAPL"  # a real StockBench headline


def _shown(**evidence):
    return Shown(
        [
            SystemMessage(content="system MSFT 99.99"),  # the system prompt is not evidence
            HumanMessage(content="TASK: x\n" + render_evidence(evidence)),
            ToolMessage(content=json.dumps({"close": 201.7}), tool_call_id="1"),
        ]
    )


def _note(summary="", key_points=(), evidence=(), **kw):
    return AnalystNote(
        symbol="AAPL",
        analyst="news",
        stance=0.25,
        confidence=0.5,
        summary=summary or "s",
        key_points=list(key_points),
        evidence=list(evidence),
        **kw,
    )


def test_a_mention_is_a_ticker_by_its_form_or_a_universe_symbol_as_a_word():
    assert mentions("buy $PLTR and NASDAQ: AMZN, NasdaqGS:HON", UNIVERSE) == {"PLTR", "AMZN", "HON"}
    assert mentions("MSFT leads; (GS) lags; BRK.B holds", UNIVERSE) == {"MSFT", "GS", "BRK.B"}
    # one letter only in a ticker's form; a capital inside a word or a lower-case word is no mention
    assert mentions("a V-shaped recovery in MSFTX and msft", UNIVERSE) == set()
    assert mentions("Visa (V) and $V", UNIVERSE) == {"V"}


def test_a_verbatim_quote_of_what_was_shown_may_name_another_symbol_own_words_may_not():
    shown = _shown(news={"items": [{"headline": f"<UNTRUSTED_FEED_DATA>\n{HEADLINE}\n</UNTRUSTED_FEED_DATA>"}]})
    for ok in (HEADLINE, f"\u201c{HEADLINE}\u201d", f'Yahoo ran "{HEADLINE}" on Tuesday', HEADLINE.upper()):
        check_symbol(_note(summary=ok), "AAPL", UNIVERSE, shown)
    for bad in (
        "MSFT generates more cash",
        f'"{HEADLINE} and more" says buy MSFT',
        '"MSFT"',
        f"{HEADLINE}, so buy MSFT",
    ):
        with pytest.raises(GuardError, match="names MSFT") as e:
            check_symbol(_note(key_points=[bad]), "AAPL", UNIVERSE, shown)
        assert e.value.check == "cross_symbol"
    check_symbol(_note(summary="AAPL and $AAPL, Apple itself"), "AAPL", UNIVERSE, shown)  # its own symbol


def test_a_figure_is_a_decimal_a_percentage_or_a_dollar_amount():
    assert [
        (w, v, d) for w, v, d in figures("SMA50 above SMA200, Q1 2025, RSI14 at 66.72, +22%, $1,200.5 and 5-10")
    ] == [("66.72", 66.72, 2), ("22%", 22.0, 0), ("$1,200.5", 1200.5, 1)]


def test_figures_must_be_the_evidences_or_the_notes_own():
    shown = _shown(
        technical={"rsi14": 66.7226, "close": 201.7},
        fundamentals={"pe": 31.25, "net_margin_pct": 24.3},
        news={"items": [{"headline": "Palantir soars 22% on record quarter, lifting tech stocks"}]},
    )
    for ok in (
        "RSI14 66.7226",
        "RSI14 at 66.72",
        "rsi 66.723",
        "P/E 31.25",
        "margin 24.3%",
        "close $201.7",
        "stance 0.25 on confidence 0.5",
        '"Palantir soars 22% on record quarter, lifting tech stocks"',
        "3 headlines over 30 days",
    ):
        check_figures(_note(summary=ok), shown)
    check_figures(_note(summary="trend 0.33", subscores={"trend": 0.33}), shown)  # its own subscore
    for bad in (
        "RSI14 at 66.7",
        "RSI14 at 66.73",
        "P/E 41.37",
        "Palantir soared 22%",
        "margin 24%",
        "close $202",
        "system said 99.99",
    ):
        with pytest.raises(GuardError, match="is not a figure of the evidence") as e:
            check_figures(_note(key_points=[bad]), shown)
        assert e.value.check == "citation"
