"""The LLM critical path (bench/critical_path.py): counted from a recording and the nodes' fan-out."""

import json
import sys
from pathlib import Path

from graph.machine.runner import run_state_machine
from schemas.events import new_event
from tests.helpers import mock_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from critical_path import critical_path


def _request(state, payload):
    """An llm_request as the store holds it (critical_path reads requests through parse_event)."""
    return {**new_event("s-1", "s-1:c1", state, "llm_request", payload), "seq": 1}


def req(state, schema=None, attempt=1):
    return _request(state, {"messages": [], "structured_output": schema, "attempt": attempt})


def test_fan_out_per_state():
    events = [
        req("PLANNING"),
        req("PLANNING"),
        req("PLANNING", "Plan"),
        # two symbols: 4 analysts each (one with a repair retry), a quant with two tool passes
        *[req("ANALYZING", "AnalystNote") for _ in range(7)],
        req("ANALYZING", "AnalystNote"),
        req("ANALYZING", "AnalystNote", attempt=2),
        req("ANALYZING"),
        req("ANALYZING"),
        req("ANALYZING", "QuantAnswer"),
        *[req("DEBATE", "DebateCase") for _ in range(4)],
        req("DEBATE", "ManagerVerdict"),
        *[req("DEBATE", "DebateCase") for _ in range(4)],
        req("DEBATE", "ManagerVerdict"),
        req("DECIDING", "TradeThesis"),
        req("DECIDING", "TradeThesis"),
        {"kind": "transition", "state": "DECIDING", "payload": {}},
        req("MEMORIZING", "AgentMemory"),
    ]
    path = critical_path(events)
    assert path == {"PLANNING": 3, "ANALYZING": 3, "DEBATE": 3, "DECIDING": 1, "MEMORIZING": 1, "total": 11}


def test_a_recorded_offline_cycle():
    store = mock_store()
    out = run_state_machine("AAPL", "2012-06-01", store=store)
    path = critical_path(store.events.read(out.session_id))
    # PLANNING: its Plan pass alone (pass protocol 3); ANALYZING: the quant's tool round + its answer; DEBATE: build,
    # rebuttal, verdict
    assert path == {"PLANNING": 1, "ANALYZING": 2, "DEBATE": 3, "DECIDING": 1, "MEMORIZING": 1, "total": 8}
    assert path["total"] < out.llm_calls == 13


def ask(state, task, symbol=None, schema=None, tools=False):
    """A request as the audit records it: its prompt names the task and, in the evidence, the symbol."""
    evidence = json.dumps({"symbol": symbol, "task": task} if symbol else {"task": task}, separators=(",", ":"))
    messages = [
        {"type": "system", "content": "..."},
        {"type": "human", "content": f"TASK: {task}\nrole\n<EVIDENCE>\n{evidence}\n</EVIDENCE>"},
    ]
    return _request(
        state, {"structured_output": schema, "attempt": 1, "messages": messages, "tools": ["t"] if tools else []}
    )


def test_runs_are_told_apart_by_their_task_when_branches_interleave():
    # two symbols' branches recorded interleaved, as a networked model's parallel calls are
    a, d, m = "ANALYZING", "DEBATE", "MEMORIZING"
    events = [
        ask(a, "quant", "AAPL", tools=True),
        ask(a, "analyst:technical", "AAPL", "AnalystNote"),
        ask(a, "quant", "MSFT", tools=True),
        ask(a, "analyst:technical", "MSFT", "AnalystNote"),
        ask(a, "critique:technical", "MSFT", "AnalystNote"),  # reads MSFT's note: same run
        ask(a, "quant", "MSFT", "QuantAnswer"),
        ask(a, "critique:technical", "AAPL", "AnalystNote"),
        ask(a, "critique:technical", "MSFT", "AnalystNote"),  # MSFT's critique, repaired
        ask(a, "quant", "AAPL", "QuantAnswer"),
        *[ask(d, t, s, "DebateCase") for t in ("bull_build", "bear_build") for s in ("AAPL", "MSFT")],
        ask(d, "bear_rebuttal", "MSFT", "DebateCase"),
        ask(d, "manager", "AAPL", "ManagerVerdict"),
        ask(d, "bull_rebuttal", "MSFT", "DebateCase"),
        ask(d, "bull_rebuttal", "MSFT", "DebateCase"),
        ask(d, "manager", "MSFT", "ManagerVerdict"),
        ask(m, "reviewer", "AAPL", "TradeReview"),
        ask(m, "memory", None, "AgentMemory"),
        ask(m, "memory", None, "AgentMemory"),
    ]
    path = critical_path(events)
    # the recorded order alone would have cut these into other runs
    assert path == {"ANALYZING": 3, "DEBATE": 4, "MEMORIZING": 2, "total": 9}
