"""The graph's behaviour over real cycles with the offline model on mongomock."""

import json

import pytest

from agent.config import RiskLimits
from graph.machine.runner import InputError, SessionNotFound, run_state_machine
from schemas.states import STATES
from tests.helpers import events_of, mock_store, services_with


@pytest.fixture(scope="module")
def full_cycle():
    store = mock_store()
    # 2012-06-01 with AAPL and MSFT: both LONG, both pass risk, trades execute (see test below)
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    return store, out


def test_full_cycle_visits_all_eight_states_in_order(full_cycle):
    store, out = full_cycle
    assert out.status == "completed"
    transitions = [e["payload"] for e in events_of(store, out, "transition")]
    assert [t["to"] for t in transitions] == list(STATES) + ["END"]
    assert transitions[0]["from"] == "START"
    assert set(out.contracts) == set(STATES)


def test_llm_states_have_request_and_response_events(full_cycle):
    store, out = full_cycle
    evs = events_of(store, out)
    for state in ("PLANNING", "ANALYZING", "DEBATE", "DECIDING", "MEMORIZING"):
        kinds = {e["kind"] for e in evs if e["state"] == state}
        assert {"llm_request", "llm_response"} <= kinds, state
    requests = [e for e in evs if e["kind"] == "llm_request"]
    responses = [e for e in evs if e["kind"] == "llm_response"]
    assert len(requests) == len(responses) == out.llm_calls
    assert all(r["payload"]["usage"]["total_tokens"] > 0 for r in responses)
    assert all(isinstance(r["payload"]["latency_ms"], float) for r in responses)


def test_no_request_offers_tools_and_asks_for_structured_output(full_cycle):
    store, out = full_cycle
    requests = [e["payload"] for e in events_of(store, out, "llm_request")]
    tool_passes = [r for r in requests if r["tools"]]
    json_passes = [r for r in requests if r["structured_output"]]
    assert tool_passes and json_passes  # both kinds really happened
    assert all(not (r["tools"] and r["structured_output"]) for r in requests)


def test_tool_passes_offer_only_the_states_allow_list(full_cycle):
    store, out = full_cycle
    for e in events_of(store, out, "llm_request"):
        tools = set(e["payload"]["tools"])
        if e["state"] == "ANALYZING":
            assert tools <= {"get_indicators", "get_price_history", "get_news_features"}
        else:
            assert not tools, e["state"]
    calls = events_of(store, out, "tool_call")
    assert {c["payload"]["name"] for c in calls if c["state"] == "EXECUTING"} == {"submit_decision"}
    results = events_of(store, out, "tool_result")
    assert len(results) == len(calls) and all(r["payload"]["error"] is None for r in results)


def test_events_are_plain_documents_with_a_gap_free_seq(full_cycle):
    store, out = full_cycle
    evs = events_of(store, out)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    assert out.events == len(evs)
    json.dumps(evs)  # plain data, nothing pickled
    contracts = {e["payload"]["name"] for e in evs if e["kind"] == "contract"}
    assert {
        "MarketScan",
        "Plan",
        "QuantReport",
        "DebateReport",
        "PortfolioDecision",
        "DecisionValidation",
        "ExecutionResult",
        "AgentMemory",
    } <= contracts


def test_forbidden_tool_call_is_refused_and_audited():
    store = mock_store()
    # the quant's tool pass (ANALYZING) reaches for the executor and for another state's tool
    script = {
        "tools:quant": [
            [
                {"name": "submit_decision", "args": {"orders": []}},
                {"name": "get_portfolio", "args": {}},
                {"name": "get_indicators", "args": {"symbol": "AAPL", "names": ["rsi14"]}},
            ]
        ]
    }
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with(script))
    errors = [e["payload"] for e in events_of(store, out, "error")]
    refused = [e for e in errors if e.get("type") == "tool_refused"]
    assert [(r["tool"], r["state"]) for r in refused] == [
        ("submit_decision", "ANALYZING"),
        ("get_portfolio", "ANALYZING"),
    ]
    assert refused[0]["allowed"] == ["get_indicators", "get_news_features", "get_price_history"]
    executed = [e for e in events_of(store, out, "tool_call") if e["payload"]["name"] == "submit_decision"]
    assert all(e["state"] == "EXECUTING" for e in executed)
    ran = [e["payload"]["name"] for e in events_of(store, out, "tool_call") if e["state"] == "ANALYZING"]
    assert ran == ["get_indicators"]  # the allowed call ran; the refused ones never reached a tool


def test_malformed_answer_is_repaired_with_the_validation_error():
    store = mock_store()
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with({"Plan": ["not json at all"]}))
    assert out.status in ("completed", "rejected")
    plan_requests = [e for e in events_of(store, out, "llm_request") if e["payload"]["structured_output"] == "Plan"]
    assert len(plan_requests) == 2
    repair = plan_requests[1]["payload"]["messages"][-1]["content"]
    assert "did not validate as Plan" in repair and "Invalid JSON" in repair
    vals = [e["payload"] for e in events_of(store, out, "validation") if e["payload"].get("schema") == "Plan"]
    assert [v["ok"] for v in vals] == [False, True]


def test_persistent_bad_answers_fail_closed_with_no_trade():
    store = mock_store()
    bad = json.dumps({"symbol": "AAPL", "winner": "SIDEWAYS", "conviction": 0.5, "manager_rationale": "x"})
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with({"ManagerVerdict": [bad] * 3}))
    assert out.status == "failed"
    assert "EXECUTING" not in out.contracts and "DECIDING" not in out.contracts
    errors = [e for e in events_of(store, out, "error")]
    assert (
        errors[-1]["state"] == "DEBATE"
        and "ManagerVerdict did not validate after 3 attempt(s)" in errors[-1]["payload"]["message"]
    )
    assert not events_of(store, out, "tool_call") or all(
        e["payload"]["name"] != "submit_decision" for e in events_of(store, out, "tool_call")
    )
    assert store.executions.get(out.cycle_id) is None
    assert [e["payload"]["to"] for e in events_of(store, out, "transition")][-1] == "END"


def test_sizer_stays_within_a_tight_daily_loss_cap():
    store = mock_store()
    # a 0.1% daily loss cap: the sizer buys less (or nothing) instead of proposing what the engine rejects
    out = run_state_machine(
        "AAPL,MSFT", "2012-06-01", store=store, services=services_with(risk=RiskLimits(daily_loss_cap_pct=0.1))
    )
    assert out.status == "completed" and out.contracts["VALIDATING"]["passed"]
    full = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    small = {o["symbol"]: o["quantity"] for o in out.contracts["DECIDING"]["orders"]}
    usual = {o["symbol"]: o["quantity"] for o in full.contracts["DECIDING"]["orders"]}
    assert usual and all(small.get(s, 0) < q for s, q in usual.items())


def test_failed_validation_routes_to_memorizing_without_executing():
    from graph.machine.builder import build_graph
    from graph.machine.nodes.deciding import deciding

    def oversized(state, config):  # a decision the risk engine must refuse: ten times the sized quantity
        cmd = deciding(state, config)
        for o in cmd.update["decision"]["orders"]:
            o["quantity"] *= 10
        return cmd

    store = mock_store()
    out = run_state_machine(
        "AAPL,MSFT",
        "2012-06-01",
        store=store,
        services=services_with(),
        graph=build_graph(overrides={"DECIDING": oversized}),
    )
    assert out.status == "rejected"
    assert out.contracts["VALIDATING"]["passed"] is False
    assert any(r.startswith("max_notional_pct") for r in out.contracts["VALIDATING"]["reasons"])
    assert "EXECUTING" not in out.contracts and "MEMORIZING" in out.contracts
    path = [e["payload"]["to"] for e in events_of(store, out, "transition")]
    assert path[-3:] == ["VALIDATING", "MEMORIZING", "END"]
    assert store.executions.get(out.cycle_id) is None
    assert all(e["payload"]["name"] != "submit_decision" for e in events_of(store, out, "tool_call"))


def test_ticker_guard_fails_the_state_closed():
    store = mock_store()
    wrong = json.dumps(
        {"symbol": "MSFT", "analyst": "technical", "stance": 0.5, "confidence": 0.9, "summary": "about another stock"}
    )
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with({"AnalystNote": [wrong]}))
    assert out.status == "failed" and out.error["state"] == "ANALYZING"
    assert "names symbol 'MSFT'" in out.error["message"]


@pytest.mark.parametrize(
    "symbols,as_of,needle",
    [
        ("AAPL,ZZZZ", "2012-06-01", "ZZZZ"),
        ("AAPL", "2012-13-01", "2012-13-01"),
        ("AAPL", "1999-01-04", "1999-01-04"),
    ],
)
def test_bad_input_is_rejected_before_any_event(symbols, as_of, needle):
    store = mock_store()
    with pytest.raises(InputError) as e:
        run_state_machine(symbols, as_of, store=store, services=services_with())
    assert needle in str(e.value)
    assert store.events.sessions() == []


def test_unknown_session_is_an_input_error():
    with pytest.raises(SessionNotFound):
        run_state_machine("AAPL", "2012-06-01", store=mock_store(), session_id="nope", services=services_with())


def test_same_inputs_give_the_same_contracts():
    a = run_state_machine("AAPL,IBM", "2010-03-01", store=mock_store(), services=services_with())
    b = run_state_machine("AAPL,IBM", "2010-03-01", store=mock_store(), services=services_with())

    def strip(c):
        return {k: v for k, v in c.items() if k not in ("EXECUTING", "MEMORIZING")}

    assert strip(a.contracts) == strip(b.contracts)


def test_token_budget_fails_the_cycle_closed():
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(token_budget=6000))
    assert out.status == "failed"
    assert "token budget (max_tokens) of 6000 per cycle would be crossed" in out.error["message"]
    assert out.error["type"] == "TokenBudgetExceeded"
    assert "EXECUTING" not in out.contracts
    assert store.executions.get(out.cycle_id) is None
    used = sum(
        e["payload"]["usage"]["total_tokens"] for e in events_of(store, out, "llm_response") if e["payload"]["usage"]
    )
    # checked before each call (its input estimate + its most output): the call that would cross it is never made
    assert used <= 6000
    assert len(events_of(store, out, "llm_request")) == len(events_of(store, out, "llm_response"))
    unlimited = run_state_machine("AAPL,MSFT", "2012-06-01", store=mock_store(), services=services_with())
    assert unlimited.status == "completed" and unlimited.tokens["total_tokens"] > 6000


@pytest.mark.parametrize("goto", ["EXECUTING", "SCANNING", "NOWHERE"])
def test_a_node_that_goes_where_the_table_forbids_fails_the_cycle_closed(goto):
    """DECIDING handing straight to EXECUTING would skip the risk checks: LangGraph follows any goto to a node that
    exists, so the machine checks each one against the state table."""
    from langgraph.types import Command

    from graph.machine.builder import build_graph
    from graph.machine.nodes.deciding import deciding

    def skips_validation(state, config):
        cmd = deciding(state, config)
        return Command(goto=goto, update=cmd.update)

    store = mock_store()
    out = run_state_machine(
        "AAPL,MSFT",
        "2012-06-01",
        store=store,
        services=services_with(),
        graph=build_graph(overrides={"DECIDING": skips_validation}),
    )
    assert out.status == "failed"
    [error] = [e["payload"] for e in events_of(store, out, "error")]
    assert error["type"] == "IllegalTransition" and error["state"] == "DECIDING"
    assert f"it asked for {goto}" in error["message"] and "VALIDATING" in error["message"]
    assert set(out.contracts) == {"SCANNING", "PLANNING", "ANALYZING", "DEBATE"}  # its decision never stands
    assert store.executions.get(out.cycle_id) is None
    path = [e["payload"]["to"] for e in events_of(store, out, "transition")]
    assert path[-2:] == ["DECIDING", "END"]


def test_the_same_decision_through_the_table_executes():
    """The control: the unchanged DECIDING through a swapped-in node goes on to VALIDATING."""
    from graph.machine.builder import build_graph
    from graph.machine.nodes.deciding import deciding

    def unchanged(state, config):
        return deciding(state, config)

    out = run_state_machine(
        "AAPL,MSFT",
        "2012-06-01",
        store=mock_store(),
        services=services_with(),
        graph=build_graph(overrides={"DECIDING": unchanged}),
    )
    assert out.status == "completed" and "VALIDATING" in out.contracts
