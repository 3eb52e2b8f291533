"""Wires the eight states. Transitions live in each node's Command[Literal[...]] signature."""
from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graph.nodes.analyzing import analyzing
from graph.nodes.debate import debate
from graph.nodes.deciding import deciding
from graph.nodes.executing import executing
from graph.nodes.memorizing import memorizing
from graph.nodes.planning import planning
from graph.nodes.scanning import scanning
from graph.nodes.validating import validating
from graph.state import CycleInput, CycleState

NODES = {
    "SCANNING": (scanning, ("PLANNING", END)),
    "PLANNING": (planning, ("ANALYZING", END)),
    "ANALYZING": (analyzing, ("DEBATE", END)),
    "DEBATE": (debate, ("DECIDING", END)),
    "DECIDING": (deciding, ("VALIDATING", END)),
    "VALIDATING": (validating, ("EXECUTING", "MEMORIZING", END)),
    "EXECUTING": (executing, ("MEMORIZING", END)),
    "MEMORIZING": (memorizing, (END,)),
}


def build_graph(checkpointer=None, overrides=None):
    """`overrides` swaps a node's function while keeping its name and edges (LangGraph Studio wraps SCANNING)."""
    builder = StateGraph(CycleState, input_schema=CycleInput)
    for name, (fn, destinations) in NODES.items():
        builder.add_node(name, (overrides or {}).get(name, fn), destinations=destinations)
    builder.add_edge(START, "SCANNING")
    return builder.compile(checkpointer=checkpointer, name="tradegraph")
