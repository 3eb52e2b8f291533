"""A cached answer is used only when it is the recorded answer it names (issue 28, hole 7). Planting answers in
`llm_cache` (touching no event) steered the next cycle's contracts in five states while the audit, --check-chain,
--verify and the look-ahead audit stayed clean. The fake OpenAI server counts every request, so "not used" is a
request on the wire."""

import json

import pytest

from agent.config import AgentConfig
from database.events import event_hash
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.replay.session import verify_session
from tests.helpers import events_of, mock_store

pytestmark = pytest.mark.integration


def _run(store):
    return run_state_machine(
        "AAPL,MSFT", "2012-06-01", store=store, services=default_services(AgentConfig.from_env(memory="session"))
    )


def _verify_errors(store, out) -> list[dict]:
    return [
        e["payload"]
        for e in events_of(store, out, "error")
        if e["payload"].get("type") == "llm_cache_error" and e["payload"].get("op") == "verify"
    ]


def _contracts(out) -> str:
    return json.dumps(out.contracts, sort_keys=True, default=str).replace(out.session_id, "<sid>")


def test_planted_cache_entries_are_never_used_and_each_is_audited(openai_server):
    store = mock_store()
    first = _run(store)
    sent = len(openai_server.requests)
    entries = store.llm_cache.count()
    assert entries > 5
    # every entry's answer replaced by another, as a store writer would plant them
    store.llm_cache.col.update_many(
        {}, {"$set": {"message.data.content": '{"planted": true}', "message.data.tool_calls": []}}
    )
    again = _run(store)
    assert again.cached_calls == 0 and len(openai_server.requests) - sent == again.llm_calls == first.llm_calls
    assert _contracts(again).replace(again.session_id, "<sid>") == _contracts(first)  # nothing planted reached it
    errors = _verify_errors(store, again)
    assert len(errors) == first.llm_calls and all(e["fatal"] is False for e in errors)
    assert errors[0]["message"].startswith("the entry's answer is not the one the llm_response it cites (event ")
    assert again.status == first.status  # a refused entry is a miss, never a failed cycle
    print(
        f"\nplanted cache entries: {entries}; answers asked of them: {first.llm_calls}; used: {again.cached_calls}; "
        f"refused and audited: {len(errors)}; requests sent again: {len(openai_server.requests) - sent}"
    )


def test_an_entry_whose_cited_event_was_edited_or_deleted_is_not_used(openai_server):
    store = mock_store()
    first = _run(store)
    responses = events_of(store, first, "llm_response")
    edited, deleted = responses[0], responses[1]
    doc = store.db["state_events"].find_one({"session_id": first.session_id, "seq": edited["seq"]})
    store.db["state_events"].update_one({"_id": doc["_id"]}, {"$set": {"latency_ms": 1.0}})  # no re-hash
    store.db["state_events"].delete_one({"session_id": first.session_id, "seq": deleted["seq"]})
    sent = len(openai_server.requests)
    again = _run(store)
    assert len(openai_server.requests) - sent == 2 and again.cached_calls == first.llm_calls - 2
    reasons = {e["cached_from"]: e["message"] for e in _verify_errors(store, again)}
    assert reasons.keys() == {edited["event_id"], deleted["event_id"]}
    assert reasons[edited["event_id"]].endswith("was edited after it was written (its content does not match its hash)")
    assert reasons[deleted["event_id"]].endswith("is not in the store (deleted, or not stored yet)")


def test_verify_compares_each_cached_answer_with_the_answer_it_cites(openai_server):
    store = mock_store()
    first = _run(store)
    again = _run(store)
    assert again.cached_calls == first.llm_calls and verify_session(store, again.session_id).ok
    # the first session's answers rewritten and its chain re-hashed to the end (head moved): consistent on its own,
    # so only the comparison of the second session's cached answers with what they cite can tell
    docs = store.events.read(first.session_id)
    target = next(d for d in docs if d["kind"] == "llm_response")
    prev = docs[target["seq"] - 2]["hash"]
    for d in docs[target["seq"] - 1 :]:
        d["prev_hash"] = prev
        if d["seq"] == target["seq"]:
            d["payload"]["text"] = '{"rewritten": true}'
        d["hash"] = prev = event_hash(d)
        store.db["state_events"].replace_one({"session_id": first.session_id, "seq": d["seq"]}, d)
    store.db["chain_heads"].update_one({"_id": first.session_id}, {"$set": {"hash": prev}})
    assert store.events.verify_chain(first.session_id)["ok"]
    report = verify_session(store, again.session_id)
    cited = [d for v in report.cycles for d in v.divergences if "cached_from" in d.path]
    assert not report.ok and len(cited) == 1
    assert cited[0].path == (
        f"seq {cited[0].path.split()[1]} cached_from {target['event_id']} (the cached answer "
        f"differs from the answer it cites)"
    )
    assert cited[0].recorded["text"] == '{"rewritten": true}'


def test_verify_with_a_key_names_a_cited_session_whose_chain_was_rehashed(openai_server, monkeypatch):
    """Under TRADEGRAPH_AUDIT_KEY the source re-hashed to its end no longer matches its signed head: verify of the
    session that used its answers says so (the comparison of answers alone would pass a source rewritten together
    with the cached copies)."""
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", "k" * 32)
    store = mock_store()
    first = _run(store)
    again = _run(store)
    docs = store.events.read(first.session_id)
    prev = docs[-2]["hash"]
    last = docs[-1]
    last["prev_hash"], last["ts"] = prev, last["ts"] + 1
    last["hash"] = event_hash(last)
    store.db["state_events"].replace_one({"session_id": first.session_id, "seq": last["seq"]}, last)
    store.db["chain_heads"].update_one({"_id": first.session_id}, {"$set": {"hash": last["hash"]}})
    report = verify_session(store, again.session_id)
    cited = [d for v in report.cycles for d in v.divergences if "cached_from" in d.path]
    assert not report.ok and len(cited) == again.cached_calls
    assert (
        f"(the cited event's session {first.session_id} fails its hash chain at seq {last['seq']}: the chain "
        f"head's signature does not verify" in cited[0].path
    )
