"""A run's context travels one way (CycleContext, the graph's context_schema), the configuration is parsed once per
command, and pass protocols are named versions whose flags the code asks (issue 23)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from agent.call_context import OUTSIDE_A_CYCLE
from agent.config import AgentConfig, ConfigError, command_config
from agent.prompts import BASE_SYSTEM_BEFORE_4
from agent.protocols import CURRENT, PASS_PROTOCOLS, PROTOCOLS, version
from database import connect
from graph.machine.cycle_context import CycleContext, context_of
from graph.machine.memory import MemoryBank
from graph.machine.runner import cycle_run_config, run_state_machine
from graph.transports.cli.main import main
from schemas.states import ALLOW_LISTS, MARKET_TOOLS
from tests.helpers import events_of, mock_store, services_with

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def counted(monkeypatch):
    """Every call of AgentConfig.from_env, counted; the parse itself unchanged."""
    calls = []
    parse = AgentConfig.from_env.__func__

    def counting(cls, **overrides):
        calls.append(overrides)
        return parse(cls, **overrides)

    monkeypatch.setattr(AgentConfig, "from_env", classmethod(counting))
    return calls


def _run(*extra: str) -> int:
    db = f"mongomock://run_context_{uuid.uuid4().hex[:8]}"
    return main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--db", db, "--json", *extra])


def test_a_run_parses_the_configuration_once(counted, capsys):
    assert _run() == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "completed" and len(counted) == 1, counted
    # the next command parses again (its start-up check), once
    assert _run("--memory", "off") == 0
    assert len(counted) == 2


def test_the_memory_flag_overrides_the_parsed_configuration(counted, capsys):
    db = f"mongomock://run_context_{uuid.uuid4().hex[:8]}"
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--db", db, "--json", "--memory", "off"]) == 0
    session = json.loads(capsys.readouterr().out)["session_id"]
    [manifest] = connect(db).events.read(session, kind="manifest")
    assert manifest["payload"]["config"]["memory"] == "off" and len(counted) == 1


def test_the_parsed_configuration_follows_the_environment(counted, monkeypatch):
    first = command_config()
    assert command_config() is first and len(counted) == 1
    monkeypatch.setenv("TRADEGRAPH_MAX_RETRIES", "5")  # changed after the parse: parsed again, never stale
    assert command_config().max_repair_retries == 5 and len(counted) == 2
    with pytest.raises(ConfigError, match="'nope'"):
        command_config(memory="nope")


def test_the_runner_hands_the_cycle_its_context_and_langgraph_only_its_own():
    store = mock_store()
    rt = services_with(token_budget=10_000)
    cache = rt.llm_cache = store.llm_cache
    rt.memory = MemoryBank(store.memories)
    writer = store.writer(background=False)
    config, context = cycle_run_config(
        rt, thread_id="t", handler=None, writer=writer, run_name="r", metadata={}, session_id="s"
    )
    assert config["configurable"] == {"thread_id": "t"}
    assert isinstance(context, CycleContext) and context.services is rt and context.audit_writer is writer
    assert context.budget is not None and context.cache is cache and context.recall is not None
    writer.close()


def test_outside_a_run_the_agent_layer_gets_the_current_protocol_and_no_run_budget():
    call = OUTSIDE_A_CYCLE
    assert call.protocol is CURRENT and call.protocol.number == 5
    assert (call.tools, call.budget, call.cache, call.recall, call.universe) == (None, None, None, None, ())
    # a run started without a context (a Studio server's) gets the process's default services, and no cycle id: no
    # process budget or cache either
    given = context_of(None, {"configurable": {"thread_id": "t"}})
    assert given.services is not None and given.call().protocol is CURRENT
    assert (given.budget, given.cache, given.audit_writer) == (None, None, None)


def test_the_agent_layer_reads_no_configurable_keys():
    """The run's context reaches agent/ as a CallContext argument, never through config["configurable"]."""
    reads = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "agent").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "configurable" in line.split("#")[0]
    ]
    assert reads == []


def test_nodes_take_langgraphs_runtime():
    """LangGraph hands each node the run's Runtime[CycleContext] by its `runtime` parameter."""
    import inspect

    from graph.machine.nodes import NODE_FUNCTIONS

    for name, node in NODE_FUNCTIONS.items():
        assert "runtime" in inspect.signature(node).parameters, name


def test_a_cycle_runs_and_records_its_runtimes_protocol():
    store = mock_store()
    rt = services_with()
    rt.protocol = 2
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=rt)
    [manifest] = events_of(store, out, "manifest")
    assert manifest["payload"]["protocols"] == {"passes": 2}
    requests = events_of(store, out, "llm_request")
    planning = [e for e in requests if e["state"] == "PLANNING"]
    assert planning and planning[0]["payload"]["tools"]  # protocol 2's PLANNING offered its market tools
    # and the agent layer's passes ran it too: protocol 2's system prompt in every request, not today's
    assert {r["payload"]["messages"][0]["content"] for r in requests} == {BASE_SYSTEM_BEFORE_4}


def test_the_protocol_table_names_each_version_and_what_it_changed():
    assert PASS_PROTOCOLS == (1, 2, 3, 4, 5) and CURRENT is PROTOCOLS[5]
    assert [
        (p.ends_on_tool_results, p.compact_json, p.planning_tools, p.lean_prompts, p.shows_constraints)
        for p in PROTOCOLS.values()
    ] == [
        (False, False, True, False, False),
        (True, True, True, False, False),
        (True, True, False, False, False),
        (True, True, False, True, False),
        (True, True, False, True, True),
    ]
    assert all(p.name and p.changed for p in PROTOCOLS.values())
    assert version(1).allow_list("PLANNING") == MARKET_TOOLS and version(3).allow_list("PLANNING") == frozenset()
    assert version(4).allow_lists() == dict(ALLOW_LISTS)
    for unknown in (0, 6, "4", True):
        with pytest.raises(ValueError, match="unknown"):
            version(unknown)


# `protocol >= 4`, `protocol < retired[0]`, `(protocol or 0) >= 4`, `protocol >= LEAN_FROM`
_NUMBER_CHECK = re.compile(r"protocol\)?\s*(?:or 0\)\s*)?[<>]=?\s*(?:\d|LEAN_FROM)|\bLEAN_FROM\b")


def test_no_code_compares_protocol_numbers():
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("agent", "graph")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _NUMBER_CHECK.search(line.split("#")[0])
    ]
    assert offenders == []
    assert _NUMBER_CHECK.search("if protocol >= 2 and x") and _NUMBER_CHECK.search("(protocol or 0) >= 4")
