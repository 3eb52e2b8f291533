"""Wires the states of the state table (schemas/states.py): one node each, with the table's destinations.
Each node's own `Command[Literal[...]]` names the same destinations (a test holds them equal)."""
from __future__ import annotations

from langgraph.graph import START, StateGraph

from graph.nodes import NODE_FUNCTIONS
from graph.state import CycleInput, CycleState
from schemas.states import STATE_TABLE


def build_graph(checkpointer=None, overrides=None):
    """`overrides` swaps a node's function while keeping its name and edges (LangGraph Studio wraps SCANNING)."""
    builder = StateGraph(CycleState, input_schema=CycleInput)
    for spec in STATE_TABLE:
        builder.add_node(spec.name, (overrides or {}).get(spec.name, NODE_FUNCTIONS[spec.name]),
                         destinations=spec.destinations)
    builder.add_edge(START, STATE_TABLE[0].name)
    return builder.compile(checkpointer=checkpointer, name="tradegraph")
