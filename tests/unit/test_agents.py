"""Analyst panel, calibration, thesis anchoring and the debate over real cycles."""

import json

import pytest

from agent.analysts import ABSTAIN_CONFIDENCE
from agent.calibration import ABSTAIN_MODEL, calibrate, opposition_share
from agent.thesis import ThesisError, anchor_prices, validate_thesis
from graph.machine.runner import run_state_machine
from schemas.analysis import AnalystNote
from schemas.decision import TradeThesis
from tests.helpers import events_of, mock_store, services_with


def note(stance, confidence=0.6, model="offline-quick", analyst="technical"):
    return AnalystNote(
        symbol="AAPL", analyst=analyst, stance=stance, confidence=confidence, summary="s", model_used=model
    )


def abstained(analyst="news"):
    return note(0.0, 0.15, ABSTAIN_MODEL, analyst)


# ------------------------------------------------------------------ calibration
def test_no_opposition_leaves_conviction_unchanged():
    assert calibrate(0.8, [note(0.5), note(0.3)], "LONG") == (0.8, 0.0)


def test_one_opposing_with_three_abstaining_is_full_opposition():
    notes = [note(-0.5), abstained("news"), abstained("sentiment"), abstained("fundamental")]
    conviction, share = calibrate(0.8, notes, "LONG")
    assert share == 1.0
    assert conviction == pytest.approx(0.8 * 0.4)


def test_haircut_is_proportional_and_neutral_notes_do_not_dilute():
    notes = [note(0.5), note(-0.4), note(0.02), abstained()]  # 0.02 is neutral
    assert opposition_share(notes, "LONG") == pytest.approx(0.5)
    assert calibrate(1.0, notes, "LONG")[0] == pytest.approx(1 - 0.6 * 0.5)
    assert calibrate(1.0, notes, "SHORT")[0] == pytest.approx(1 - 0.6 * 0.5)


# ------------------------------------------------------------------ thesis prices
def thesis(direction="LONG", entry=100.0, stop=95.0, target=110.0, atr=None):
    return TradeThesis(
        symbol="AAPL",
        direction=direction,
        conviction=0.6,
        entry=entry,
        stop=stop,
        target=target,
        horizon_sessions=10,
        rationale="r",
        atr14=atr,
    )


@pytest.mark.parametrize("direction,stop,target", [("LONG", 96.0, 108.0), ("SHORT", 104.0, 92.0)])
def test_prices_are_anchored_to_atr(direction, stop, target):
    t = anchor_prices(thesis(direction), price=100.0, atr=2.0)
    assert (t.entry, t.stop, t.target, t.price_source) == (100.0, stop, target, "atr_anchor")
    validate_thesis(t)


def test_sub_tick_atr_keeps_the_models_prices():
    t = anchor_prices(thesis(entry=100.0, stop=95.0, target=110.0), price=100.0, atr=0.001)
    assert (t.entry, t.stop, t.target, t.price_source) == (100.0, 95.0, 110.0, "model")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(stop=100.0), "equals entry"),
        (dict(target=90.0), "wrong side"),
        (dict(direction="SHORT", stop=105.0, target=110.0), "wrong side"),
        (dict(stop=80.0, atr=2.0), "4×ATR"),
    ],
)
def test_thesis_validator_fails_closed(kwargs, message):
    with pytest.raises(ThesisError, match=message):
        validate_thesis(thesis(**kwargs))


# ------------------------------------------------------------------ panel behaviour in cycles
def test_abstention_makes_no_llm_call():
    store = mock_store()
    # IBM on 2012-06-15: no sample news and no fundamentals source -> news, sentiment, fundamental abstain
    out = run_state_machine("IBM", "2012-06-15", store=store, services=services_with())
    notes = out.contracts["ANALYZING"]["panels"][0]["notes"]
    abst = {n["analyst"] for n in notes if n["model_used"] == ABSTAIN_MODEL}
    assert abst == {"news", "sentiment", "fundamental"}
    assert all(n["stance"] == 0 and n["confidence"] == ABSTAIN_CONFIDENCE for n in notes if n["analyst"] in abst)
    analyst_prompts = [
        e
        for e in events_of(store, out, "llm_request")
        if e["state"] == "ANALYZING" and e["payload"]["structured_output"] == "AnalystNote"
    ]
    tasks = {
        json.loads(m["content"].split("<EVIDENCE>")[1].split("</EVIDENCE>")[0])["task"]
        for e in analyst_prompts
        for m in e["payload"]["messages"]
        if m["type"] == "human" and "<EVIDENCE>" in m["content"]
    }
    assert tasks and all(t.endswith("technical") for t in tasks)
    audited = [e["payload"] for e in events_of(store, out, "abstained")]
    assert {a["analyst"] for a in audited} == abst


def test_quorum_failure_is_degraded_and_halts_before_debate():
    store = mock_store()
    bad = "{}"
    # IBM 2012-06-15 has one real analyst (technical); break it and the rest abstain -> 3/4 ok. Break with a
    # symbol that has news too: AAPL has technical, news and sentiment; break two of them.
    out = run_state_machine(
        "AAPL", "2011-10-10", store=store, services=services_with({"AnalystNote": [bad] * 6}, max_repair_retries=2)
    )
    assert out.status == "degraded"
    assert "DEBATE" not in out.contracts
    assert out.contracts["ANALYZING"]["degraded"] is True
    assert "quorum" in out.error["message"]
    assert not [e for e in events_of(store, out) if e["state"] == "DEBATE"]


def test_self_critique_fires_only_below_the_floor():
    store = mock_store()
    low = json.dumps(
        {
            "symbol": "IBM",
            "analyst": "technical",
            "stance": 0.3,
            "confidence": 0.39,
            "summary": "low",
            "evidence": ["rsi14=50"],
        }
    )
    out = run_state_machine("IBM", "2012-06-15", store=store, services=services_with({"AnalystNote": [low]}))
    tech = [n for n in out.contracts["ANALYZING"]["panels"][0]["notes"] if n["analyst"] == "technical"][0]
    assert tech["self_critiqued"] is True
    store2 = mock_store()
    ok = json.dumps({"symbol": "IBM", "analyst": "technical", "stance": 0.3, "confidence": 0.40, "summary": "ok"})
    out2 = run_state_machine("IBM", "2012-06-15", store=store2, services=services_with({"AnalystNote": [ok]}))
    tech2 = [n for n in out2.contracts["ANALYZING"]["panels"][0]["notes"] if n["analyst"] == "technical"][0]
    assert tech2["self_critiqued"] is False

    def critiques(s, o):
        return [
            e
            for e in events_of(s, o, "llm_request")
            if any("TASK: critique:" in m["content"] for m in e["payload"]["messages"])
        ]

    assert len(critiques(store, out)) == 1 and critiques(store2, out2) == []


def test_high_conviction_escalates_the_trader_to_the_deep_tier():
    from agent.config import AgentConfig
    from agent.offline_model import OfflineChatModel
    from graph.machine.cycle_context import default_services

    store = mock_store()
    cfg = AgentConfig(deep_tier_conviction=0.55)  # a threshold this date's four verdicts straddle
    rt = default_services(cfg, model_factory=lambda c, tier: OfflineChatModel(model_name=f"offline-{tier}"))
    out = run_state_machine("AAPL,MSFT,IBM,GOOG", "2012-06-01", store=store, services=rt)
    convictions = {r["symbol"]: r["conviction"] for r in out.contracts["DEBATE"]["results"]}
    trader_models = [
        e["payload"]["model"]
        for e in events_of(store, out, "llm_request")
        if e["payload"]["structured_output"] == "TradeThesis"
    ]
    expected = sorted("offline-deep" if c >= 0.55 else "offline-quick" for c in convictions.values())
    assert sorted(trader_models) == expected
    assert "offline-deep" in expected and "offline-quick" in expected


def test_rebuttal_failure_falls_back_to_the_first_case():
    store = mock_store()
    # the two builds come from the offline rules (None = no script); every later DebateCase answer is malformed
    out = run_state_machine(
        "AAPL",
        "2012-06-01",
        store=store,
        services=services_with({"DebateCase": [None, None] + ["oops"] * 6}, max_repair_retries=2),
    )
    r = out.contracts["DEBATE"]["results"][0]
    assert r["rebuttal_fallbacks"] == ["bear", "bull"]
    assert out.status in ("completed", "rejected")
