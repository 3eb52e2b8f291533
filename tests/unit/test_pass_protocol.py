"""The pass protocol (agent/passes.py): protocol 2 ends a tool pass with the round whose tool results came back,
so the structured pass reads them directly; protocol 1 (the code before) asked the model once more. Each
cycle's manifest records its protocol, and a replay asks what its recording asked: an old-protocol session,
with or without the manifest entry, still verifies identical; a replay that departs is reported."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from agent.json_chat_model import lean_schema, response_format
from agent.passes import PASS_PROTOCOL, json_instruction, pass_protocol, use_pass_protocol
from graph.replay.session import load_session, verify_session
from graph.runner import run_cycle
from schemas.states import STATE_CONTRACTS
from tests.helpers import events_of, mock_store, runtime_with

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from critical_path import critical_path  # noqa: E402

SYMBOLS = "AAPL,MSFT,IBM,GOOG"
COMPARED = ("SCANNING", "PLANNING", "ANALYZING", "DEBATE", "DECIDING", "VALIDATING")


def _record(symbols=SYMBOLS, protocol=None, script=None):
    store = mock_store()
    if protocol is None:
        out = run_cycle(symbols, "2012-06-01", store=store, runtime=runtime_with(script))
    else:
        with use_pass_protocol(protocol):
            out = run_cycle(symbols, "2012-06-01", store=store, runtime=runtime_with(script))
    return store, out


@pytest.fixture(scope="module")
def both():
    return {1: _record(protocol=1), 2: _record()}


def _requests(store, out, state=None):
    return [e for e in events_of(store, out, "llm_request") if state is None or e["state"] == state]


def test_protocol_2_drops_the_call_after_the_tool_round(both):
    (s1, o1), (s2, o2) = both[1], both[2]
    assert PASS_PROTOCOL == 2
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


def test_the_structured_pass_reads_the_tool_results(both):
    store, out = both[2]
    plan = next(e for e in _requests(store, out, "PLANNING") if e["payload"]["structured_output"] == "Plan")
    kinds = [m["type"] for m in plan["payload"]["messages"]]
    assert kinds == ["system", "human", "ai", "tool", "tool", "human"]
    tool_text = [m["content"] for m in plan["payload"]["messages"] if m["type"] == "tool"]
    assert len(tool_text) == 2 and all(json.loads(t) for t in tool_text)
    # compact JSON: no space after the separators (protocol 1 wrote json.dumps' default ", " and ": ")
    assert all(not any(sep in t for sep in ('", "', '": ')) for t in tool_text)
    old_store, old_out = both[1]
    old = next(e for e in _requests(old_store, old_out, "PLANNING") if e["payload"]["structured_output"] == "Plan")
    assert [m["type"] for m in old["payload"]["messages"]] == ["system", "human", "ai", "tool", "tool", "ai", "human"]
    assert any('": ' in m["content"] for m in old["payload"]["messages"] if m["type"] == "tool")


def test_a_refused_call_gets_another_round():
    script = {"tools:planning": [[{"name": "submit_decision", "args": {"orders": []}},
                                  {"name": "get_portfolio", "args": {}}]]}
    store, out = _record("AAPL", script=script)
    planning = _requests(store, out, "PLANNING")
    assert [bool(e["payload"]["tools"]) for e in planning] == [True, True, False]
    refused = [e for e in events_of(store, out, "error") if e["payload"].get("type") == "tool_refused"]
    assert len(refused) == 1 and out.status in ("completed", "rejected")
    # without a refusal one tool round is all a pass makes
    store, out = _record("AAPL")
    assert [bool(e["payload"]["tools"]) for e in _requests(store, out, "PLANNING")] == [True, False]


def test_an_old_protocol_recording_verifies_identical(both):
    store, out = both[1]
    manifest = events_of(store, out, "manifest")[0]["payload"]
    assert manifest["protocols"] == {"passes": 1}
    assert pass_protocol() == 2  # outside the context: today's code runs protocol 2
    report = verify_session(store, out.session_id)
    assert report.identical and report.ok, report.first_divergence
    verdict = report.cycles[0]
    assert verdict.config_differences == ["protocol passes: recorded 1, now 2"]
    assert any("replayed under pass protocol 1, as recorded" in n for n in verdict.notes), verdict.notes
    # the replay asked every recorded request, the extra calls included, and nothing else
    assert len(events_of(store, type("O", (), {"session_id": report.replay_session_id}), "llm_request")) == 48
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
    assert report.cycles[0].config_differences == ["protocol: recorded '<absent>', now {'passes': 2}"]


def test_a_replay_that_departs_from_the_recording_is_reported(both):
    store, out = both[1]

    def claims_2(m):  # a manifest that names the wrong protocol: the replay asks what was never asked
        m["protocols"] = {"passes": 2}
        return m

    wrong = _copy(store, out.session_id, claims_2)
    report = verify_session(wrong, out.session_id)
    assert not report.identical and report.first_divergence.state == "PLANNING"
    assert any("unrecorded LLM request in PLANNING" in n for n in report.cycles[0].notes)
    assert any("manifest says pass protocol 2, but the recorded requests read as protocol 1" in n
               for n in report.cycles[0].notes)

    def unknown(m):
        m["protocols"] = {"passes": 99}
        return m

    report = verify_session(_copy(store, out.session_id, unknown), out.session_id)
    assert not report.identical
    assert any("pass protocol 99" in n and "does not speak" in n for n in report.cycles[0].notes)


def test_a_new_protocol_recording_verifies_identical(both):
    store, out = both[2]
    report = verify_session(store, out.session_id)
    assert report.identical and report.ok and report.cycles[0].config_differences == []
    assert report.cycles[0].notes == []
    assert load_session(store, report.replay_session_id).cycles[0].llm_calls.__len__() == 43


# ---------------------------------------------------------------- what is sent, not what validates
def test_lean_schema_drops_titles_only():
    schema = {"title": "M", "type": "object", "additionalProperties": False, "required": ["title"],
              "properties": {"title": {"title": "Title", "type": "string"},
                             "meta": {"title": "Meta", "default": {"title": "kept"}, "enum": [{"title": 1}]}},
              "$defs": {"title": {"title": "T", "type": "integer"}}}
    assert lean_schema(schema) == {
        "type": "object", "additionalProperties": False, "required": ["title"],
        "properties": {"title": {"type": "string"}, "meta": {"default": {"title": "kept"}, "enum": [{"title": 1}]}},
        "$defs": {"title": {"type": "integer"}}}


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
    store, out = both[2]
    jsonschema.validate(out.contracts[state], sent)


def test_json_mode_states_the_lean_schema_except_for_protocol_1():
    from schemas.plan import Plan

    lean = json_instruction(Plan, "json_mode").content
    old = json_instruction(Plan, "json_mode", lean=False).content
    assert '"title"' in old and '"title"' not in lean and len(lean) < len(old)
    assert json.loads(lean.split(" Schema: ", 1)[1]) == lean_schema(Plan.model_json_schema())


def test_without_a_structured_pass_to_follow_the_model_is_asked_again(both):
    """The model's own last answer is the result then: protocol 2 stops early only when a structured pass follows."""
    from agent.offline_model import OfflineChatModel
    from agent.passes import tool_pass
    from agent.prompts import task_messages
    from agent.tools import ALLOW_LISTS, REGISTRY, TOOL_CONTEXT_KEY
    from graph.nodes.planning import scan_context
    from schemas.market import MarketScan

    store, out = both[2]
    scan = MarketScan.model_validate(out.contracts["SCANNING"])
    config = {"configurable": {TOOL_CONTEXT_KEY: scan_context(scan)}}
    messages = task_messages("planning", {"symbols": scan.universe, "as_of": scan.as_of})
    asked = {}
    for follows in (True, False):
        got = tool_pass(OfflineChatModel(), messages, REGISTRY, ALLOW_LISTS["PLANNING"], state="PLANNING", max_steps=4,
                        config=config, structured_follows=follows)
        asked[follows] = [m.type for m in got[len(messages):]]
    assert asked[True] == ["ai", "tool", "tool"]
    assert asked[False] == ["ai", "tool", "tool", "ai"]


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_cycle_without_a_manifest_replays_under_the_protocol_its_requests_show(both, protocol):
    """No manifest: recorded before manifests (protocol 1) or by a Studio run (today's): the requests tell which."""
    from graph.replay.session import inferred_pass_protocol

    store, out = both[protocol]
    bare = _copy(store, out.session_id, None)
    cycle = load_session(bare, out.session_id).cycles[0]
    assert cycle.manifest is None and inferred_pass_protocol(cycle.llm_calls) == protocol
    report = verify_session(bare, out.session_id)
    assert report.identical and report.ok, report.first_divergence
    assert not any("unrecorded" in n or "not asked for" in n for n in report.cycles[0].notes)
