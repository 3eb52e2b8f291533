"""MEMORIZING with a networked model: each closed position's review and the cycle's summary are asked at once
(one call deep on the critical path), with the same contract as asked one after another; the replay verifies."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

from agent.config import AgentConfig
from agent.offline_model import OfflineChatModel
from database.connection import connect
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.replay.session import verify_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from critical_path import critical_path

SYMBOLS = "AAPL,MSFT,IBM,GOOG"
OPEN, STOPPED = "2012-03-01", "2012-03-06"  # AAPL and GOOG gap through their stops (tests/unit/test_memory_loop.py)


class SlowModel(OfflineChatModel):
    """The offline model's answers after a short wait, counting how many of its calls are in flight at once."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        counter = COUNTERS[self.model_name]
        with counter["lock"]:
            counter["now"] += 1
            state = ((run_manager.metadata if run_manager else None) or {}).get("langgraph_node")
            counter["peak"][state] = max(counter["peak"].get(state, 0), counter["now"])
        try:
            time.sleep(0.05)
            return super()._generate(messages, stop, run_manager, **kwargs)
        finally:
            with counter["lock"]:
                counter["now"] -= 1


COUNTERS: dict[str, dict] = {}


def _session(networked: bool):
    name = f"slow-{uuid.uuid4().hex[:6]}"
    COUNTERS[name] = {"lock": threading.Lock(), "now": 0, "peak": {}}
    model = SlowModel(model_name=name)
    # a provider model name makes the cycle treat its model as networked (AgentConfig.parallel_llm)
    cfg = AgentConfig(quick_model="openai:gpt-4o-mini", deep_model="openai:gpt-4o") if networked else AgentConfig()
    assert cfg.parallel_llm is networked
    rt = lambda: default_services(cfg, model_factory=lambda c, tier: model)  # noqa: E731
    store = connect(f"mongomock://memp_{uuid.uuid4().hex[:10]}")
    first = run_state_machine(SYMBOLS, OPEN, store=store, services=rt())
    second = run_state_machine(SYMBOLS, STOPPED, store=store, session_id=first.session_id, services=rt())
    return store, second, COUNTERS[name]["peak"]


def test_reviews_and_summary_are_asked_at_once_with_a_networked_model():
    store, out, peak = _session(networked=True)
    _, inline, inline_peak = _session(networked=False)
    memorizing = [
        e
        for e in store.events.read(out.session_id, cycle_id=out.cycle_id)
        if e["kind"] == "llm_request" and e["state"] == "MEMORIZING"
    ]
    assert sorted(e["payload"]["structured_output"] for e in memorizing) == [
        "AgentMemory",
        "TradeReview",
        "TradeReview",
    ]
    assert peak["MEMORIZING"] == 3 and inline_peak["MEMORIZING"] == 1
    assert critical_path(store.events.read(out.session_id, cycle_id=out.cycle_id))["MEMORIZING"] == 1
    # the same reviews, in the order of the closed positions, and the same memory as asked one after another
    assert [r["symbol"] for r in out.contracts["MEMORIZING"]["reviews"]] == ["AAPL", "GOOG"]
    strip = lambda m: {k: v for k, v in m.items() if k != "cycle_id"}  # noqa: E731
    assert strip(out.contracts["MEMORIZING"]) == strip(inline.contracts["MEMORIZING"])
    report = verify_session(store, out.session_id)
    assert report.identical and report.ok, report.first_divergence
