import json

import pytest
from pydantic import ValidationError

from graph.transports.cli.main import main
from schemas import ALL_CONTRACTS, STATE_CONTRACTS, AnalystNote, Order, Plan, StateEvent, TradeThesis
from schemas.decision import DecisionResult

PLAN = dict(
    objective="o", assets=["AAPL"], quant_question="q", timeframes=["1d"], constraints={}, expected_outputs=["RSI"]
)


def test_every_state_has_its_own_contract():
    assert list(STATE_CONTRACTS) == [
        "SCANNING",
        "PLANNING",
        "ANALYZING",
        "DEBATE",
        "DECIDING",
        "VALIDATING",
        "EXECUTING",
        "MEMORIZING",
    ]
    assert len(set(STATE_CONTRACTS.values())) == 8


def test_plan_valid_and_every_field_required():
    Plan(**PLAN)
    for field in PLAN:
        bad = {k: v for k, v in PLAN.items() if k != field}
        with pytest.raises(ValidationError):
            Plan(**bad)


@pytest.mark.parametrize("model", list(ALL_CONTRACTS.values()))
def test_every_contract_forbids_extra_fields(model):
    assert model.model_config.get("extra") == "forbid"


@pytest.mark.parametrize(
    "bad",
    [
        {"stance": 1.5},
        {"stance": -1.01},
        {"confidence": 1.2},
        {"analyst": "astrologer"},
        {"symbol": "aapl"},
        {"surprise": 1},
    ],
)
def test_analyst_note_bounds(bad):
    base = dict(symbol="AAPL", analyst="technical", stance=0.2, confidence=0.5, summary="s")
    AnalystNote(**base)
    with pytest.raises(ValidationError):
        AnalystNote(**{**base, **bad})


def test_thesis_and_order_bounds():
    base = dict(
        symbol="AAPL", direction="LONG", conviction=0.5, entry=10, target=12, stop=9, horizon_sessions=5, rationale="r"
    )
    TradeThesis(**base)
    for bad in ({"direction": "UP"}, {"entry": 0}, {"conviction": 2}, {"horizon_sessions": 0}):
        with pytest.raises(ValidationError):
            TradeThesis(**{**base, **bad})
    with pytest.raises(ValidationError):
        Order(symbol="AAPL", side="HOLD", quantity=1)
    with pytest.raises(ValidationError):
        Order(symbol="AAPL", side="BUY", quantity=-1)


def test_rejected_decision_result_needs_a_reason_and_no_trades():
    with pytest.raises(ValidationError):
        DecisionResult(status="rejected", message="")


def test_state_event_kind_is_a_closed_set():
    ev = dict(
        event_id="e",
        session_id="s",
        cycle_id="c",
        seq=1,
        ts=1.0,
        state="SCANNING",
        kind="transition",
        payload={"from": "START", "to": "SCANNING"},
    )
    StateEvent(**ev)
    with pytest.raises(ValidationError):
        StateEvent(**{**ev, "kind": "gossip"})
    with pytest.raises(ValidationError):
        StateEvent(**{**ev, "seq": 0})


def test_schemas_command_writes_json_schemas(tmp_path):
    assert main(["schemas", "--out", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "Plan.schema.json" in files and "StateEvent.schema.json" in files
    plan = json.loads((tmp_path / "Plan.schema.json").read_text())
    assert set(plan["required"]) == set(PLAN)
    assert plan["additionalProperties"] is False
