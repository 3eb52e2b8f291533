"""The state table is the one definition: every other view of the machine agrees with it."""

from __future__ import annotations

import typing

from langgraph.types import Command

from agent.tools import TOOLS
from graph.machine.builder import build_graph
from graph.machine.nodes import NODE_FUNCTIONS
from schemas.states import ALLOW_LISTS, STATE_TABLE


def _annotated_destinations(fn) -> tuple[str, ...]:
    hints = typing.get_type_hints(getattr(fn, "__wrapped__", fn))
    ret = hints["return"]
    assert typing.get_origin(ret) is Command, fn
    (literal,) = typing.get_args(ret)
    return typing.get_args(literal)


def test_each_node_is_registered_and_announces_the_tables_destinations():
    assert set(NODE_FUNCTIONS) == {s.name for s in STATE_TABLE}
    for spec in STATE_TABLE:
        assert _annotated_destinations(NODE_FUNCTIONS[spec.name]) == spec.destinations, spec.name


def test_the_compiled_graph_has_the_tables_edges():
    graph = build_graph().get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    for spec in STATE_TABLE:
        for dest in spec.destinations:
            assert (spec.name, dest) in edges, (spec.name, dest)


def test_allow_lists_name_only_registered_tools_and_only_executing_may_execute():
    for state, names in ALLOW_LISTS.items():
        assert names <= set(TOOLS), (state, names - set(TOOLS))
    assert [s for s, names in ALLOW_LISTS.items() if "submit_decision" in names] == ["EXECUTING"]


def test_retired_allow_lists_are_older_protocols_only_and_never_execute():
    """The lists a replay of an older pass protocol needs: registered tools, no executor, and retired by a protocol
    this code speaks (so today's cycles, under PASS_PROTOCOL, use the table's)."""
    from agent.passes import PASS_PROTOCOL, PASS_PROTOCOLS
    from schemas.states import RETIRED_ALLOW_LISTS, allow_list

    assert RETIRED_ALLOW_LISTS, "nothing retired: drop this test with the mapping"
    for state, (retired_in, names) in RETIRED_ALLOW_LISTS.items():
        assert state in ALLOW_LISTS and names <= set(TOOLS) and "submit_decision" not in names
        assert retired_in in PASS_PROTOCOLS and names != ALLOW_LISTS[state]
        assert allow_list(state, retired_in - 1) == names and allow_list(state, retired_in) == ALLOW_LISTS[state]
    assert all(allow_list(s, PASS_PROTOCOL) == ALLOW_LISTS[s] for s in ALLOW_LISTS)
