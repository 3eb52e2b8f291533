"""Point in time, across runs: a cycle at date t recalls only memories known before t. Lessons planted at and
after t (the look-ahead perturbation) change nothing decided up to t, and a rerun of a backtest in the same
store never recalls what the first run learned later than the date it is deciding."""

from __future__ import annotations

import uuid

from agent.config import AgentConfig
from database import connect
from graph.machine.cycle_context import default_services
from graph.services.backtest.loop import load_logs, run_backtest
from schemas.memory import MemoryRecord
from schemas.simulation import EpisodeConfig

TICKERS = ["AAPL", "MSFT"]
T = "2011-02-15"
START, END = "2011-02-09", "2011-02-17"
# every regime word and every agent's words: a planted note shares terms with any query
LOUD = (
    "LONG setup uptrend downtrend above_sma50 below_sma50 rsi_overbought rsi_oversold rsi_neutral "
    "macd_positive macd_negative high_volatility normal_volatility low_volatility chart trend momentum news "
    "headline sentiment valuation fundamentals indicators long win target loss stop falsified conviction horizon"
)


def _planted(symbols, dates) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            memory_id=f"future:{s}:{d}:{i}",
            kind="review",
            symbol=s,
            direction="LONG",
            outcome="loss",
            signal="Falsified",
            known_at=d,
            session_id="elsewhere",
            text=f"{s} {LOUD} lesson {i}",
        )
        for s in symbols
        for d in dates
        for i in range(3)
    ]


def _run(tmp_path, store, name, run_id):
    cfg = EpisodeConfig(
        episode_id=run_id,
        tickers=TICKERS,
        initial_cash=100_000.0,
        start=START,
        end=END,
        every=1,
        bars_in_case=5,
        memory="on",
    )
    run_backtest(
        cfg, store, progress=False, services=default_services(AgentConfig()), out_dir=tmp_path / name, run_id=run_id
    )
    return load_logs(tmp_path / name / run_id / "episode_log.jsonl")


def _seen(store, session_id) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for ev in store.events.read(session_id):
        c = out.setdefault(ev["cycle_id"], {"prompts": [], "retrievals": []})
        if ev["kind"] == "llm_request":
            c["prompts"].append(ev["payload"]["messages"])
        elif ev["kind"] == "retrieval":
            c["retrievals"].append(ev["payload"])
    return out


def test_lessons_from_t_onwards_change_nothing_decided_up_to_t(tmp_path):
    clean = connect(f"mongomock://pit_{uuid.uuid4().hex[:10]}")
    planted = connect(f"mongomock://pit_{uuid.uuid4().hex[:10]}")
    for r in _planted(TICKERS, [T, "2011-02-16", "2011-03-01"]):
        assert planted.memories.add(r)
    a, b = _run(tmp_path, clean, "clean", "pit"), _run(tmp_path, planted, "planted", "pit")
    seen_a, seen_b = _seen(clean, "bt-pit"), _seen(planted, "bt-pit")
    for la, lb in zip(a, b):
        if la.date > T:
            continue
        assert la.model_dump() == lb.model_dump(), f"decision point {la.date} changed"
        cycle = la.agent_output["cycle_id"]
        assert seen_a[cycle]["prompts"] == seen_b[cycle]["prompts"], f"{la.date}: a prompt changed"
        assert seen_a[cycle]["retrievals"] == seen_b[cycle]["retrievals"]
    # the perturbation is real: the first cycle after t recalls the planted lessons known at t
    after = next(lb for lb in b if lb.date > T).agent_output["cycle_id"]
    recalled = {h["memory_id"] for r in seen_b[after]["retrievals"] for h in r["hits"]}
    assert any(m.startswith("future:") and f":{T}:" in m for m in recalled)
    assert not any(":2011-03-01:" in m or ":2011-02-16:" in m for m in recalled)


def test_a_rerun_never_recalls_the_first_runs_later_lessons(tmp_path):
    store = connect(f"mongomock://pit_{uuid.uuid4().hex[:10]}")
    _run(tmp_path, store, "first", "run1")
    learned = {m.memory_id: m.known_at for m in store.memories.all() if m.session_id == "bt-run1"}
    assert learned and max(learned.values()) >= T  # the first run wrote lessons up to its end
    _run(tmp_path, store, "second", "run2")
    checked = 0
    for cycle_id, seen in _seen(store, "bt-run2").items():
        as_of = next(e for e in store.events.read("bt-run2", kind="manifest") if e["cycle_id"] == cycle_id)["payload"][
            "inputs"
        ]["as_of"]
        for r in seen["retrievals"]:
            assert r["filter"]["known_before"] == as_of
            for h in r["hits"]:
                assert h["known_at"] < as_of, f"{cycle_id} at {as_of} recalled {h['memory_id']} known {h['known_at']}"
                checked += h["memory_id"] in learned
    assert checked, "the rerun recalled nothing of the first run: the test would prove nothing"
