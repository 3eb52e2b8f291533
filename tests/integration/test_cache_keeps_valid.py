"""The response cache keeps only answers that were used (issue 31): one that failed its contract or was cut off at
the length limit is asked again on the next run, never replayed from the cache. The fake OpenAI server counts
every request, so "asked again" is a request on the wire."""

import pytest

from agent.config import AgentConfig
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from tests.fakes.fake_openai import Fault
from tests.helpers import mock_store

pytestmark = pytest.mark.integration


def _run(store):
    return run_state_machine(
        "AAPL", "2012-06-01", store=store, services=default_services(AgentConfig.from_env(memory="session"))
    )


def _plans(server) -> int:
    return sum(
        1 for r in server.requests if (r.get("response_format") or {}).get("json_schema", {}).get("name") == "Plan"
    )


def test_an_answer_that_failed_validation_is_asked_again(openai_server):
    openai_server.faults.append(Fault(when="Plan", content="not json at all"))
    store = mock_store()
    first = _run(store)
    assert _plans(openai_server) == 2, "the bad Plan, then its repair"
    sent = len(openai_server.requests)
    again = _run(store)
    # the first Plan request is sent again (the server now answers it well); everything after it is the same
    # conversation as the repaired one and is served from the cache
    assert len(openai_server.requests) - sent == 1 and _plans(openai_server) == 3
    assert again.contracts.keys() == first.contracts.keys()


def test_an_answer_cut_off_at_the_length_limit_is_never_cached(openai_server):
    # a tool round whose answer says it was cut off (its calls still run): used by this run, not kept for the next
    # (a JSON pass's cut-off answer the SDK raises on, and was never kept)
    openai_server.faults.append(Fault(when="tools", finish_reason="length"))
    store = mock_store()
    _run(store)
    sent = len(openai_server.requests)
    _run(store)
    assert len(openai_server.requests) - sent == 1


def test_an_entry_without_the_accepted_mark_is_a_miss(openai_server):
    """Entries written before this rule may hold failures: none is served."""
    store = mock_store()
    _run(store)
    sent = len(openai_server.requests)
    store.llm_cache.col.update_many({}, {"$unset": {"accepted": ""}})
    _run(store)
    assert len(openai_server.requests) - sent == sent
