"""The LLM response cache against the local OpenAI server, which counts every HTTP request it gets."""

import json

import pytest

from agent.config import AgentConfig
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.replay.session import load_session_log, verify_session
from tests.helpers import events_of, mock_store

pytestmark = pytest.mark.integration


@pytest.fixture
def fake(openai_server):
    return openai_server


def _run(store, **config):
    # memory of this session only: with memory on, the second run would recall the first one's notes, a
    # different prompt (rightly a miss)
    config.setdefault("memory", "session")
    return run_state_machine(
        "AAPL,MSFT", "2012-06-01", store=store, services=default_services(AgentConfig.from_env(**config))
    )


def test_an_identical_rerun_sends_no_request_and_audits_every_hit(fake):
    store = mock_store()
    first = _run(store)
    sent = len(fake.requests)
    assert sent == first.llm_calls > 10 and first.cached_calls == 0
    again = _run(store)
    assert len(fake.requests) == sent and again.llm_calls == 0, "not one request sent again"
    assert again.cached_calls == first.llm_calls
    # the same contracts, ids aside (a rerun is a new session)
    same = json.dumps(first.contracts, sort_keys=True, default=str)
    assert json.dumps(again.contracts, sort_keys=True, default=str).replace(again.session_id, first.session_id) == same
    # each hit: the request still recorded, the answer marked cached with the event it came from
    originals = {e["event_id"]: e for e in events_of(store, first, "llm_response")}
    requests = [e for e in events_of(store, again, "llm_request") if e["cycle_id"] == again.cycle_id]
    hits = [
        e for e in events_of(store, again, "llm_response") if e["cycle_id"] == again.cycle_id and e["payload"]["cached"]
    ]
    assert len(requests) == len(hits) == first.llm_calls
    assert all(r["payload"]["model"] in ("gpt-4o-mini", "gpt-4o") and r["payload"]["messages"] for r in requests)
    for hit in hits:
        p = hit["payload"]
        assert p["cached"] is True and p["http_status"] is None
        source = originals[p["cached_from"]]["payload"]
        assert (source["text"], source["tool_calls"]) == (p["text"], p["tool_calls"])
        assert source["cached"] is False


def test_a_rerun_sends_nothing(fake):
    store = mock_store()
    _run(store)
    sent = len(fake.requests)
    _run(store)
    assert len(fake.requests) == sent


def test_no_cache_sends_every_request_again(fake):
    store = mock_store()
    first = _run(store)
    sent = len(fake.requests)
    again = _run(store, llm_cache=False)
    assert len(fake.requests) == 2 * sent and again.cached_calls == 0 and again.llm_calls == first.llm_calls


def test_a_request_that_differs_is_not_answered_from_the_cache(fake):
    store = mock_store()
    _run(store)
    sent = len(fake.requests)
    other = run_state_machine(
        "AAPL,MSFT", "2012-06-04", store=store, services=default_services(AgentConfig.from_env())
    )  # another day: other prompts
    assert len(fake.requests) - sent == other.llm_calls > 0


def test_the_offline_model_is_never_cached():
    store = mock_store()
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=default_services(AgentConfig()))
    assert out.cached_calls == 0 and store.llm_cache.count() == 0


def test_a_failing_cache_is_a_miss_audited_not_a_failed_cycle(fake):
    class Broken:
        def get(self, key):
            raise ConnectionError("cache store down")

        def put(self, key, entry):
            raise ConnectionError("cache store down")

    store = mock_store()
    rt = default_services(AgentConfig.from_env())
    rt.llm_cache = Broken()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=rt)
    assert out.status in ("completed", "rejected") and out.llm_calls == len(fake.requests) > 0
    errors = [e["payload"] for e in events_of(store, out, "error") if e["payload"].get("type") == "llm_cache_error"]
    assert {e["op"] for e in errors} == {"read", "write"} and all(e["fatal"] is False for e in errors)
    assert load_session_log(store, out.session_id).cycles[0].status == out.status  # read back as non-fatal too


def test_verify_answers_from_the_recording_even_with_a_poisoned_cache(fake):
    store = mock_store()
    out = _run(store)
    # every cached answer replaced by a different one: a replay that read the cache would diverge
    store.llm_cache.col.update_many(
        {}, {"$set": {"message.data.content": '{"poisoned": true}', "message.data.tool_calls": []}}
    )
    served = len(fake.requests)
    report = verify_session(store, out.session_id)
    assert report.identical, report
    assert len(fake.requests) == served


def test_a_session_answered_from_the_cache_verifies(fake):
    store = mock_store()
    _run(store)
    again = _run(store)
    assert again.cached_calls > 0
    served = len(fake.requests)
    assert verify_session(store, again.session_id).identical
    assert len(fake.requests) == served


def test_no_cache_is_an_input_field_and_a_cli_flag(fake):
    from graph.kernel.core import Kernel
    from graph.transports.cli.main import main

    store = mock_store()
    k = Kernel(store)
    args = {"symbols": ["AAPL"], "as_of": "2012-06-01", "memory": "session"}
    first = k.call("run_cycle", args)
    sent = len(fake.requests)
    assert k.call("run_cycle", {**args, "no_cache": True}).llm_calls == first.llm_calls == len(fake.requests) - sent
    sent = len(fake.requests)
    assert (
        main(
            [
                "run",
                "--symbols",
                "AAPL",
                "--as-of",
                "2012-06-01",
                "--memory",
                "session",
                "--no-cache",
                "--json",
                "--db",
                store.uri,
            ]
        )
        == 0
    )
    assert len(fake.requests) - sent == first.llm_calls
    sent = len(fake.requests)
    assert (
        main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--memory", "session", "--json", "--db", store.uri])
        == 0
    )
    assert len(fake.requests) == sent  # the cache is on again: nothing new to ask


def test_the_environment_turns_it_off(fake, monkeypatch):
    """TRADEGRAPH_LLM_CACHE=off: what a LangGraph Studio server (no input fields) is configured with."""
    store = mock_store()
    monkeypatch.setenv("TRADEGRAPH_LLM_CACHE", "off")
    first = _run(store)
    again = _run(store)
    assert again.cached_calls == 0 and len(fake.requests) == first.llm_calls + again.llm_calls
    assert store.llm_cache.count() == 0  # nothing stored either
