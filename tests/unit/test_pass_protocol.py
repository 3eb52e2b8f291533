"""The pass protocol (agent/passes.py): protocol 2 ends a tool pass with the round whose tool results came back,
so the structured pass reads them directly; protocol 1 (the code before) asked the model once more. Protocol 3
drops PLANNING's tool pass: its evidence carries what its two tools returned. Protocol 4 leans the prompts
(tests/unit/test_lean_prompts.py). Each cycle's manifest records its protocol, and a replay asks what its recording asked: an old-protocol session, with or without the manifest entry,
still verifies identical; a replay that departs is reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from agent.call_context import OUTSIDE_A_CYCLE
from agent.json_chat_model import lean_schema, response_format
from agent.passes import PASS_PROTOCOL, json_instruction
from agent.prompts import find_evidence
from graph.machine.runner import run_state_machine
from graph.services.replay.session import load_session_log, verify_session
from schemas.states import ALLOW_LISTS, MARKET_TOOLS, STATE_CONTRACTS, allow_list
from tests.helpers import events_of, mock_store, services_with

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from critical_path import critical_path

SYMBOLS = "AAPL,MSFT,IBM,GOOG"
COMPARED = ("SCANNING", "PLANNING", "ANALYZING", "DEBATE", "DECIDING", "VALIDATING")


def _record(symbols=SYMBOLS, protocol=None, script=None):
    store = mock_store()
    rt = services_with(script)
    if protocol is not None:
        rt.protocol = protocol  # the pass protocol is the services' (graph/machine/cycle_context.py)
    out = run_state_machine(symbols, "2012-06-01", store=store, services=rt)
    return store, out


@pytest.fixture(scope="module")
def both():
    """The same 4-symbol cycle recorded under each protocol (4: today's default)."""
    return {1: _record(protocol=1), 2: _record(protocol=2), 3: _record(protocol=3), 4: _record()}


def _requests(store, out, state=None):
    return [e for e in events_of(store, out, "llm_request") if state is None or e["state"] == state]


def _task(request) -> str:
    """The TASK line of a request's prompt (agent/prompts.py task_messages)."""
    return next(
        m["content"].split("\n", 1)[0][len("TASK: ") :]
        for m in request["payload"]["messages"]
        if str(m.get("content") or "").startswith("TASK: ")
    )


def _evidence(request) -> dict:
    from langchain_core.messages import HumanMessage

    return find_evidence(
        [HumanMessage(content=m["content"]) for m in request["payload"]["messages"] if m["type"] == "human"]
    )


def test_protocol_2_drops_the_call_after_the_tool_round(both):
    (s1, o1), (s2, o2) = both[1], both[2]
    tool_passes = len([e for e in _requests(s1, o1) if e["payload"]["tools"]]) // 2  # two calls each under 1
    assert tool_passes == 5  # PLANNING + one quant per symbol
    assert len(_requests(s2, o2)) == len(_requests(s1, o1)) - tool_passes == o2.llm_calls
    assert (len(_requests(s1, o1)), len(_requests(s2, o2))) == (48, 43)
    p1, p2 = critical_path(s1.events.read(o1.session_id)), critical_path(s2.events.read(o2.session_id))
    assert (p1["PLANNING"], p1["ANALYZING"], p1["total"]) == (3, 3, 11)
    assert (p2["PLANNING"], p2["ANALYZING"], p2["total"]) == (2, 2, 9)
    # the same decisions: only the conversation got shorter
    for state in COMPARED:
        assert o1.contracts[state] == o2.contracts[state], state


def test_protocol_3_plans_in_one_call_without_tools(both):
    (s2, o2), (s3, o3) = both[2], both[3]
    assert PASS_PROTOCOL == 5 and OUTSIDE_A_CYCLE.protocol.number == 5
    assert [bool(e["payload"]["tools"]) for e in _requests(s2, o2, "PLANNING")] == [True, False]
    [plan] = _requests(s3, o3, "PLANNING")
    assert plan["payload"]["tools"] == [] and plan["payload"]["structured_output"] == "Plan"
    assert [m["type"] for m in plan["payload"]["messages"]] == ["system", "human", "human"]
    # PLANNING's tool round and its two tool calls are gone; nothing else changed
    assert len(_requests(s3, o3)) == len(_requests(s2, o2)) - 1 == o3.llm_calls == 42
    planning_tools = {
        p: [e for e in events_of(s, o, "tool_call") if e["state"] == "PLANNING"] for p, (s, o) in both.items()
    }
    assert (len(planning_tools[2]), len(planning_tools[3])) == (2, 0)
    assert len(events_of(s2, o2)) - len(events_of(s3, o3)) == 6  # request + response, 2 × (tool_call + tool_result)
    p2, p3 = critical_path(s2.events.read(o2.session_id)), critical_path(s3.events.read(o3.session_id))
    assert p3 == {**p2, "PLANNING": 1, "total": p2["total"] - 1}
    assert (p3["PLANNING"], p3["ANALYZING"], p3["DEBATE"], p3["DECIDING"], p3["MEMORIZING"], p3["total"]) == (
        1,
        2,
        3,
        1,
        1,
        8,
    )
    for state in COMPARED:
        assert o2.contracts[state] == o3.contracts[state], state


def test_planning_evidence_holds_what_its_tools_returned(both):
    """What protocol 2's model fetched with get_portfolio and get_market_snapshot is, value for value, what protocol
    3's evidence carries: dropping the tool pass took nothing from the planner."""
    (s2, o2), (s3, o3) = both[2], both[3]
    plan2 = next(e for e in _requests(s2, o2, "PLANNING") if e["payload"]["structured_output"] == "Plan")
    calls = {c["id"]: c["name"] for m in plan2["payload"]["messages"] if m["type"] == "ai" for c in m["tool_calls"]}
    fetched = {
        calls[m["tool_call_id"]]: json.loads(m["content"]) for m in plan2["payload"]["messages"] if m["type"] == "tool"
    }
    assert set(fetched) == MARKET_TOOLS
    assert fetched["get_market_snapshot"] and {"prev_close", "volume", "sma200"} <= set(
        fetched["get_market_snapshot"][0]
    )
    [plan3] = _requests(s3, o3, "PLANNING")
    evidence = _evidence(plan3)
    assert evidence["portfolio"] == fetched["get_portfolio"]
    assert evidence["market"] == fetched["get_market_snapshot"]
    assert [row["symbol"] for row in evidence["market"]] == SYMBOLS.split(",")
    # protocol 2's own evidence stayed as it was (its replays match it byte for byte): a summary without them
    old = _evidence(plan2)
    assert old["portfolio"] != fetched["get_portfolio"] and "sma200" not in old["market"][0]
    assert {k: v for k, v in old.items() if k not in ("portfolio", "market")} == {
        k: v for k, v in evidence.items() if k not in ("portfolio", "market")
    }


def test_planning_evidence_carries_open_positions_whole(both):
    """With a book: every field of each position (levels, horizon, setup) reaches the planner, as get_portfolio
    returns it; protocol 2's summary had the quantity only."""
    from agent.config import AgentConfig
    from agent.tools import TOOLS, with_context
    from graph.machine.nodes.planning import planning_evidence, scan_context
    from schemas.market import MarketScan
    from schemas.portfolio import PortfolioSnapshot, Position

    store, out = both[3]
    scan = MarketScan.model_validate(out.contracts["SCANNING"])
    book = PortfolioSnapshot(
        cash=50_000.0,
        as_of="2012-06-01",
        positions={
            "AAPL": Position(
                symbol="AAPL",
                quantity=10,
                avg_price=500.0,
                opened="2012-05-25",
                stop=480.0,
                target=560.0,
                horizon_sessions=10,
                sessions_held=4,
                setup=["trend_up"],
            )
        },
    )
    scan = scan.model_copy(update={"portfolio": book})
    answer = TOOLS["get_portfolio"].invoke(with_context({}, scan_context(scan)))
    settings = AgentConfig.from_env(provider="offline")
    new = planning_evidence(scan, settings, with_tool_answers=True)
    assert new["portfolio"] == answer and new["portfolio"]["positions"]["AAPL"]["stop"] == 480.0
    assert new["portfolio"]["positions"]["AAPL"]["setup"] == ["trend_up"]
    old = planning_evidence(scan, settings, with_tool_answers=False)
    assert old["portfolio"] == {"cash": 50_000.0, "positions": {"AAPL": 10.0}}


def test_the_structured_pass_reads_the_tool_results(both):
    def quant_json(store, out):
        return next(
            e
            for e in _requests(store, out, "ANALYZING")
            if e["payload"]["structured_output"] == "QuantAnswer" and _task(e) == "quant"
        )

    for protocol in (2, 3):
        quant = quant_json(*both[protocol])
        assert [m["type"] for m in quant["payload"]["messages"]] == ["system", "human", "ai", "tool", "tool", "human"]
        tool_text = [m["content"] for m in quant["payload"]["messages"] if m["type"] == "tool"]
        assert len(tool_text) == 2 and all(json.loads(t) for t in tool_text)
        # compact JSON: no space after the separators (protocol 1 wrote json.dumps' default ", " and ": ")
        assert all(not any(sep in t for sep in ('", "', '": ')) for t in tool_text)
    old = quant_json(*both[1])
    assert [m["type"] for m in old["payload"]["messages"]] == ["system", "human", "ai", "tool", "tool", "ai", "human"]
    assert any('": ' in m["content"] for m in old["payload"]["messages"] if m["type"] == "tool")
    # protocol 2's PLANNING still ran its tool pass the same way
    plan2 = next(e for e in _requests(*both[2], "PLANNING") if e["payload"]["structured_output"] == "Plan")
    assert [m["type"] for m in plan2["payload"]["messages"]] == ["system", "human", "ai", "tool", "tool", "human"]


def test_a_refused_call_gets_another_round():
    script = {
        "tools:quant": [
            [
                {"name": "submit_decision", "args": {"orders": []}},
                {"name": "get_indicators", "args": {"symbol": "AAPL", "names": ["rsi14"]}},
            ]
        ]
    }
    store, out = _record("AAPL", script=script)
    quant = [e for e in _requests(store, out, "ANALYZING") if _task(e) == "quant"]
    assert [bool(e["payload"]["tools"]) for e in quant] == [True, True, False]
    refused = [e for e in events_of(store, out, "error") if e["payload"].get("type") == "tool_refused"]
    assert len(refused) == 1 and refused[0]["state"] == "ANALYZING" and out.status in ("completed", "rejected")
    # without a refusal one tool round is all a pass makes
    store, out = _record("AAPL")
    assert [bool(e["payload"]["tools"]) for e in _requests(store, out, "ANALYZING") if _task(e) == "quant"] == [
        True,
        False,
    ]


def test_allow_lists_by_protocol():
    """The table says PLANNING calls nothing; the retired list serves only older protocols' replays."""
    assert ALLOW_LISTS["PLANNING"] == frozenset() and ALLOW_LISTS["SCANNING"] == MARKET_TOOLS
    assert [allow_list("PLANNING", p) for p in (1, 2, 3)] == [MARKET_TOOLS, MARKET_TOOLS, frozenset()]
    assert all(allow_list(s, p) == ALLOW_LISTS[s] for s in ALLOW_LISTS if s != "PLANNING" for p in (1, 2, 3))


def test_the_manifest_records_the_allow_lists_its_protocol_ran_with(both):
    lists = {p: events_of(s, o, "manifest")[0]["payload"]["allow_lists"] for p, (s, o) in both.items()}
    assert lists[1]["PLANNING"] == lists[2]["PLANNING"] == ["get_market_snapshot", "get_portfolio"]
    assert lists[3]["PLANNING"] == []
    assert {k: v for k, v in lists[2].items() if k != "PLANNING"} == {
        k: v for k, v in lists[3].items() if k != "PLANNING"
    }


OLD_PLANNING_TOOLS = "allow-list PLANNING: recorded ['get_market_snapshot', 'get_portfolio'], now []"


@pytest.mark.parametrize("protocol,requests", [(1, 48), (2, 43), (3, 42)])
def test_an_old_protocol_recording_verifies_identical(both, protocol, requests):
    store, out = both[protocol]
    manifest = events_of(store, out, "manifest")[0]["payload"]
    assert manifest["protocols"] == {"passes": protocol}
    assert OUTSIDE_A_CYCLE.protocol.number == 5  # outside the context: today's code runs protocol 5
    report = verify_session(store, out.session_id)
    assert report.identical and report.ok, report.first_divergence
    verdict = report.cycles[0]
    assert verdict.config_differences == [OLD_PLANNING_TOOLS] * (protocol < 3) + [
        f"protocol passes: recorded {protocol}, now 5"
    ]
    assert any(f"replayed under pass protocol {protocol}, as recorded" in n for n in verdict.notes), verdict.notes
    # the replay asked every recorded request, PLANNING's tool pass included, and nothing else
    replayed = events_of(store, type("O", (), {"session_id": report.replay_session_id}), "llm_request")
    assert len(replayed) == requests
    assert [bool(e["payload"]["tools"]) for e in replayed if e["state"] == "PLANNING"][0] is (protocol < 3)
    assert not any("not asked for" in n or "unrecorded" in n for n in verdict.notes)


def _copy(store, session_id, edit_manifest):
    """The session's events appended as a new recording (a fresh hash chain), its manifest edited (None: dropped)."""
    copy = mock_store()
    events = []
    for e in store.events.read(session_id):
        e = {k: v for k, v in e.items() if k not in ("_id", "seq", "prev_hash", "hash")}
        if e["kind"] == "manifest":
            if edit_manifest is None:
                continue
            e["payload"] = edit_manifest(dict(e["payload"]))
        events.append(e)
    copy.events.append(events)
    return copy


def test_a_manifest_from_before_protocol_versions_replays_as_protocol_1(both):
    store, out = both[1]

    def as_before(m):  # what the code before protocol versions recorded: no "protocols" entry
        m.pop("protocols")
        return m

    old = _copy(store, out.session_id, as_before)
    report = verify_session(old, out.session_id)
    assert report.identical and report.ok, report.first_divergence
    assert any("predates protocol versions" in n for n in report.cycles[0].notes)
    assert report.cycles[0].config_differences == [
        OLD_PLANNING_TOOLS,
        "protocol: recorded '<absent>', now {'passes': 5}",
    ]


def test_a_replay_that_departs_from_the_recording_is_reported(both):
    store, out = both[1]

    def claims_2(m):  # a manifest that names the wrong protocol: the replay asks what was never asked
        m["protocols"] = {"passes": 2}
        return m

    wrong = _copy(store, out.session_id, claims_2)
    report = verify_session(wrong, out.session_id)
    assert not report.identical and report.first_divergence.state == "PLANNING"
    assert any("unrecorded LLM request in PLANNING" in n for n in report.cycles[0].notes)
    assert any(
        "manifest says pass protocol 2, but the recorded requests read as protocol 1" in n
        for n in report.cycles[0].notes
    )

    def unknown(m):
        m["protocols"] = {"passes": 99}
        return m

    report = verify_session(_copy(store, out.session_id, unknown), out.session_id)
    assert not report.identical
    assert any("pass protocol 99" in n and "does not speak" in n for n in report.cycles[0].notes)


@pytest.mark.parametrize("recorded,claimed", [(2, 3), (3, 2)])
def test_a_manifest_that_names_the_wrong_side_of_protocol_3_is_reported(both, recorded, claimed):
    """2 claimed 3: the replay plans without the recorded tool round; 3 claimed 2: it asks for a tool round never
    made. Either way PLANNING diverges, and the requests say which protocol they were made under."""
    store, out = both[recorded]

    def claims(m):
        m["protocols"] = {"passes": claimed}
        return m

    report = verify_session(_copy(store, out.session_id, claims), out.session_id)
    assert not report.identical and report.first_divergence.state == "PLANNING"
    assert any("unrecorded LLM request in PLANNING" in n for n in report.cycles[0].notes)
    assert any(
        f"manifest says pass protocol {claimed}, but the recorded requests read as protocol {recorded}" in n
        for n in report.cycles[0].notes
    )


def test_a_new_protocol_recording_verifies_identical(both):
    store, out = both[4]
    report = verify_session(store, out.session_id)
    assert report.identical and report.ok and report.cycles[0].config_differences == []
    assert report.cycles[0].notes == []
    assert load_session_log(store, report.replay_session_id).cycles[0].llm_calls.__len__() == 42


# ---------------------------------------------------------------- what is sent, not what validates
def test_lean_schema_drops_titles_only():
    schema = {
        "title": "M",
        "type": "object",
        "additionalProperties": False,
        "required": ["title"],
        "properties": {
            "title": {"title": "Title", "type": "string"},
            "meta": {"title": "Meta", "default": {"title": "kept"}, "enum": [{"title": 1}]},
        },
        "$defs": {"title": {"title": "T", "type": "integer"}},
    }
    assert lean_schema(schema) == {
        "type": "object",
        "additionalProperties": False,
        "required": ["title"],
        "properties": {"title": {"type": "string"}, "meta": {"default": {"title": "kept"}, "enum": [{"title": 1}]}},
        "$defs": {"title": {"type": "integer"}},
    }


@pytest.mark.parametrize("state", [s for s, c in STATE_CONTRACTS.items() if c is not None])
def test_each_contracts_sent_schema_is_its_schema_without_titles(state, both):
    contract = STATE_CONTRACTS[state]
    full = contract.model_json_schema()
    sent = response_format(contract)["json_schema"]["schema"]
    assert '"title"' in json.dumps(full) and len(json.dumps(sent)) < len(json.dumps(full))

    def keywords(node, path=()):  # every (path, keyword, value) but titles
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "title" and isinstance(v, str) and (not path or path[-1] not in ("properties", "$defs")):
                    continue
                yield from keywords(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from keywords(v, path + (i,))
        else:
            yield path, node

    assert sorted(map(str, keywords(sent))) == sorted(map(str, keywords(full)))
    # the recorded contract validates against what was sent, as against the full schema
    store, out = both[3]
    jsonschema.validate(out.contracts[state], sent)


def test_json_mode_states_the_lean_schema_except_for_protocol_1():
    from schemas.plan import Plan

    lean = json_instruction(Plan, "json_mode").content
    old = json_instruction(Plan, "json_mode", lean=False).content
    assert '"title"' in old and '"title"' not in lean and len(lean) < len(old)
    assert json.loads(lean.split(" Schema: ", 1)[1]) == lean_schema(Plan.model_json_schema())


def test_without_a_structured_pass_to_follow_the_model_is_asked_again(both):
    """The model's own last answer is the result then: protocol 2 stops early only when a structured pass follows."""
    from agent.call_context import CallContext
    from agent.offline_model import OfflineChatModel
    from agent.passes import tool_pass
    from agent.prompts import task_messages
    from agent.tools import TOOLS
    from graph.machine.nodes.planning import scan_context
    from schemas.market import MarketScan

    store, out = both[3]
    scan = MarketScan.model_validate(out.contracts["SCANNING"])
    call = CallContext(tools=scan_context(scan))
    messages = task_messages("quant", {"symbol": "AAPL", "as_of": scan.as_of})
    asked = {}
    for follows in (True, False):
        got = tool_pass(
            OfflineChatModel(),
            messages,
            TOOLS,
            ALLOW_LISTS["ANALYZING"],
            state="ANALYZING",
            max_steps=4,
            config={},
            call=call,
            structured_follows=follows,
        )
        asked[follows] = [m.type for m in got[len(messages) :]]
    assert asked[True] == ["ai", "tool", "tool"]
    assert asked[False] == ["ai", "tool", "tool", "ai"]


@pytest.mark.parametrize("protocol", [1, 2, 3, 4])
def test_a_cycle_without_a_manifest_replays_under_the_protocol_its_requests_show(both, protocol):
    """No manifest: recorded before manifests (protocol 1) or by a Studio run (today's): the requests tell which."""
    from graph.services.replay.session import inferred_pass_protocol

    store, out = both[protocol]
    bare = _copy(store, out.session_id, None)
    cycle = load_session_log(bare, out.session_id).cycles[0]
    assert cycle.manifest is None and inferred_pass_protocol(cycle.llm_calls) == protocol
    report = verify_session(bare, out.session_id)
    assert report.identical and report.ok, report.first_divergence
    assert not any("unrecorded" in n or "not asked for" in n for n in report.cycles[0].notes)


def test_the_protocol_is_read_from_requests_whatever_the_structured_method():
    """A JSON pass asked as a function call offers its contract as its one tool and may be audited without a
    structured_output name: PLANNING offering only "Plan" still reads as protocol 3, and the JSON instruction alone
    places a structured pass after its tool results."""
    from graph.services.replay.session import LlmCall, inferred_pass_protocol

    system, task = {"type": "system", "content": "s"}, {"type": "human", "content": "TASK: x"}
    instruction = {"type": "human", "content": "Reply with only a JSON object for the QuantAnswer schema."}
    called = {"type": "ai", "content": "", "tool_calls": [{"name": "get_indicators", "args": {}, "id": "c"}]}
    result = {"type": "tool", "content": "{}", "tool_call_id": "c"}
    said = {"type": "ai", "content": "ready", "tool_calls": []}

    def call(state, messages, tools=(), schema=None):
        return LlmCall(
            seq=0, state=state, run_id=None, model="m", messages=messages, tools=list(tools), structured_output=schema
        )

    plan_fc = call(
        "PLANNING",
        [system, task, {**instruction, "content": "Reply with only a JSON object for the Plan"}],
        tools=["Plan"],
    )
    plan_tools = call("PLANNING", [system, task], tools=sorted(MARKET_TOOLS))
    quant_2 = call("ANALYZING", [system, task, called, result, instruction], tools=["QuantAnswer"])
    quant_1 = call("ANALYZING", [system, task, called, result, said, instruction], tools=["QuantAnswer"])
    assert inferred_pass_protocol([plan_fc, quant_2]) == 3
    assert inferred_pass_protocol([plan_tools, quant_2]) == 2
    assert inferred_pass_protocol([plan_tools, quant_1]) == 1
    assert inferred_pass_protocol([quant_2]) == 2  # no PLANNING request: the structured pass alone tells
    assert inferred_pass_protocol([]) is None
