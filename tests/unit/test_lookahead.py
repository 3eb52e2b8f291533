"""No look-ahead through the whole cycle: bars after t, news published after the close of t and fundamentals
reported after t are perturbed, and nothing decided up to t changes — not a contract, not a prompt."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pandas as pd

from agent.config import AgentConfig
from agent.data.fundamentals import SAMPLE_FUNDAMENTALS, FundamentalsSource
from agent.data.market import MarketData, default_market_data
from agent.data.news import SAMPLE_NEWS, NewsSource
from database import connect
from graph.machine.cycle_context import default_services
from graph.services.backtest.loop import load_logs, run_backtest
from schemas.simulation import EpisodeConfig

TICKERS = ["AAPL", "MSFT"]
T = "2011-02-15"  # a Tuesday; the US close is 16:00 EST = 21:00 UTC
START, END = "2011-02-09", "2011-02-17"  # every trading day: t's neighbours on both sides are decision points

NEWS = [json.loads(line) for line in SAMPLE_NEWS.read_text().splitlines() if line.strip()]
FUND = json.loads(SAMPLE_FUNDAMENTALS.read_text())["records"]


def _late_news() -> list[dict]:
    """Hostile headlines the offline news analyst reacts to, each published at or after t's close."""
    out = []
    for s in TICKERS:
        for stamp, text in (
            (f"{T}T21:30:00Z", "plunges after hours as SEC opens fraud probe"),
            (f"{T}T16:00:00-05:00", "warns of a revenue shortfall, shares tumble"),
            (T, "recalls products and cuts guidance; analysts downgrade"),
            ("2011-02-16T14:00:00Z", "sued by regulators; shares sink"),
        ):
            out.append({"symbol": s, "published_at": stamp, "headline": f"{s} {text}", "source": "late"})
    return out


def _late_fundamentals() -> list[dict]:
    """Figures for a period that ended before t, but filed only after t's close: a period-end key would leak them."""
    return [
        {
            "symbol": s,
            "as_of": "2011-01-01",
            "reported_at": stamp,
            "pe": 400.0,
            "pb": 90.0,
            "ev_ebitda": 300.0,
            "revenue_growth_pct": -80.0,
            "net_margin_pct": -60.0,
        }
        for s in TICKERS
        for stamp in (T, f"{T}T22:00:00Z")
    ]


def _perturbed_market() -> MarketData:
    real = default_market_data()
    rng = np.random.default_rng(7)
    frames = {}
    for s in real.universe():
        f = real.bars(s).copy()
        after = f.index > pd.Timestamp(T)
        factor = rng.uniform(0.5, 1.8, after.sum())
        for c in ("open", "high", "low", "close"):
            f.loc[after, c] = f.loc[after, c] * factor
        frames[s] = f
    return MarketData(frames, source="perturbed")


def _run(tmp_path, name, **sources):
    store = connect(f"mongomock://la_{uuid.uuid4().hex[:10]}")
    rt = default_services(AgentConfig(), **sources)
    cfg = EpisodeConfig(
        episode_id="la", tickers=TICKERS, initial_cash=100_000.0, start=START, end=END, every=1, bars_in_case=5
    )
    run_backtest(cfg, store, progress=False, services=rt, out_dir=tmp_path / name, run_id="la")
    return load_logs(tmp_path / name / "la" / "episode_log.jsonl"), store


def _seen_by_cycle(store) -> dict[str, dict]:
    """Per cycle, everything the agent saw and said: contracts and the messages of every LLM request."""
    out: dict[str, dict] = {}
    for ev in store.events.read("bt-la"):
        if ev["kind"] == "contract":
            out.setdefault(ev["cycle_id"], {})[ev["payload"]["name"]] = ev["payload"]["data"]
        elif ev["kind"] == "llm_request":
            out.setdefault(ev["cycle_id"], {}).setdefault("prompts", []).append(ev["payload"].get("messages"))
    return out


def test_cycles_up_to_t_ignore_late_bars_news_and_fundamentals(tmp_path):
    real_logs, real_store = _run(tmp_path, "real", news=NewsSource(NEWS), fundamentals=FundamentalsSource(FUND))
    late_logs, late_store = _run(
        tmp_path,
        "late",
        market=_perturbed_market(),
        news=NewsSource(NEWS + _late_news()),
        fundamentals=FundamentalsSource(FUND + _late_fundamentals()),
    )
    dates = [lg.date for lg in real_logs]
    assert T in dates and dates[-1] > T and dates[0] < T
    real_seen, late_seen = _seen_by_cycle(real_store), _seen_by_cycle(late_store)
    for a, b in zip(real_logs, late_logs):
        if a.date > T:
            continue
        assert a.model_dump() == b.model_dump(), f"decision point {a.date} changed"
        cycle = a.agent_output["cycle_id"]
        assert real_seen[cycle].get("prompts"), cycle
        for key in real_seen[cycle]:
            assert real_seen[cycle][key] == late_seen[cycle][key], f"{a.date}: {key} changed"

    # the perturbation is real: the first cycle after t sees every late headline and the late filing
    nxt = next(lg for lg in late_logs if lg.date > T).agent_output["cycle_id"]
    for snap in late_seen[nxt]["MarketScan"]["snapshots"]:
        heads = {i["headline"] for i in snap["bundle"]["news"]["items"]}
        assert {h["headline"] for h in _late_news() if h["symbol"] == snap["symbol"]} <= heads
        assert snap["bundle"]["fundamentals"]["pe"] == 400.0
