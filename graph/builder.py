"""Wires the states of the state table (schemas/states.py): one node each, with the table's destinations.
Each node's own `Command[Literal[...]]` names the same destinations (a test holds them equal)."""
from __future__ import annotations

from langgraph.graph import START, StateGraph

from graph.nodes import NODE_FUNCTIONS
from graph.runtime import CycleContext
from graph.state import CycleInput, CycleState
from schemas.states import STATE_TABLE


def build_graph(checkpointer=None, overrides=None):
    """`overrides` swaps a node's function while keeping its name and edges (LangGraph Studio wraps SCANNING)."""
    # the cycle's runtime (configuration, data, models, execution backend) is the run's context, not a global
    builder = StateGraph(CycleState, context_schema=CycleContext, input_schema=CycleInput)
    for spec in STATE_TABLE:
        builder.add_node(spec.name, (overrides or {}).get(spec.name, NODE_FUNCTIONS[spec.name]),
                         destinations=spec.destinations)
    builder.add_edge(START, STATE_TABLE[0].name)
    return builder.compile(checkpointer=checkpointer, name="tradegraph")
