"""The LLM critical path (bench/critical_path.py): counted from a recording and the nodes' fan-out."""
import sys
from pathlib import Path

from graph.runner import run_cycle
from tests.helpers import mock_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from critical_path import critical_path  # noqa: E402


def req(state, schema=None, attempt=1):
    return {"kind": "llm_request", "state": state, "payload": {"structured_output": schema, "attempt": attempt}}


def test_fan_out_per_state():
    events = [req("PLANNING"), req("PLANNING"), req("PLANNING", "Plan"),
              # two symbols: 4 analysts each (one with a repair retry), a quant with two tool passes
              *[req("ANALYZING", "AnalystNote") for _ in range(7)], req("ANALYZING", "AnalystNote"),
              req("ANALYZING", "AnalystNote", attempt=2),
              req("ANALYZING"), req("ANALYZING"), req("ANALYZING", "QuantAnswer"),
              *[req("DEBATE", "DebateCase") for _ in range(4)], req("DEBATE", "ManagerVerdict"),
              *[req("DEBATE", "DebateCase") for _ in range(4)], req("DEBATE", "ManagerVerdict"),
              req("DECIDING", "TradeThesis"), req("DECIDING", "TradeThesis"),
              {"kind": "transition", "state": "DECIDING", "payload": {}},
              req("MEMORIZING", "AgentMemory")]
    path = critical_path(events)
    assert path == {"PLANNING": 3, "ANALYZING": 3, "DEBATE": 3, "DECIDING": 1, "MEMORIZING": 1, "total": 11}


def test_a_recorded_offline_cycle():
    store = mock_store()
    out = run_cycle("AAPL", "2012-06-01", store=store)
    path = critical_path(store.events.read(out.session_id))
    assert path["DEBATE"] == 3 and path["total"] < out.llm_calls
    assert path["total"] == sum(v for k, v in path.items() if k != "total")
