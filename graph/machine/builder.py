"""Wires the states of the state table (schemas/states.py): one node each, with the table's destinations.
Each node's own `Command[Literal[...]]` names the same destinations (a test holds them equal), and every node,
swapped-in ones too, is checked at run time to go only there (graph/machine/nodes/common.py `checked`)."""

from __future__ import annotations

from langgraph.graph import START, StateGraph

from graph.machine.cycle_context import CycleContext
from graph.machine.nodes import NODE_FUNCTIONS
from graph.machine.nodes.common import transition_checked
from graph.machine.state import CycleInput, CycleState
from schemas.states import STATE_TABLE


def build_graph(checkpointer=None, overrides=None):
    """`overrides` swaps a node's function while keeping its name and edges (LangGraph Studio wraps SCANNING)."""
    # the cycle's services (configuration, data, models, execution backend) is the run's context, not a global
    builder = StateGraph(CycleState, context_schema=CycleContext, input_schema=CycleInput)
    for spec in STATE_TABLE:
        swapped = (overrides or {}).get(spec.name)
        node = transition_checked(spec.name, swapped) if swapped else NODE_FUNCTIONS[spec.name]
        builder.add_node(spec.name, node, destinations=spec.destinations)
    builder.add_edge(START, STATE_TABLE[0].name)
    return builder.compile(checkpointer=checkpointer, name="tradegraph")
