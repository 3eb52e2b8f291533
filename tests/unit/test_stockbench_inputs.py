"""StockBench's inputs as its paper states them (issue 31): a StockBench run's cycles read at most 5 news items, all
published in the 48 hours before the decision's 09:30 New York open, and recall only notes from the 7 days before
the decision date; a plain backtest still reads its 30-day window of 6 items and every earlier note. The window
travels in the run's configuration and manifest (a recorded StockBench session verifies identical), and the
scorecard's departures say what the run now does, not what it did."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from agent.config import AgentConfig
from agent.data.sources import DataFiles, stockbench_files
from agent.input_window import NEWS_ITEMS, NEWS_LOOKBACK_DAYS, STOCKBENCH, TRADEGRAPH, InputWindow
from agent.markets import decision_time, get_profile, published_time
from graph.machine.cycle_context import default_services
from graph.machine.memory import MemoryBank
from graph.machine.runner import recall_for
from graph.services.backtest.loop import episode_services as backtest_runtime
from graph.services.backtest.loop import session_id_of
from graph.services.backtest.simulation import SimulationExecution
from graph.services.benchmark.stockbench import run
from graph.services.benchmark.stockbench.protocol import Protocol
from graph.services.replay.session import verify_session
from graph.services.sweep.episode import episode_config, episode_services
from graph.services.sweep.grid import Episode
from schemas.events import ManifestEvent, parse_event
from schemas.memory import MemoryRecord
from schemas.simulation import EpisodeConfig
from tests.helpers import mock_store

OPEN = get_profile("us_equity", decide_at="open")
# JPM has 9 items in the 48 hours before the 2025-03-05 open and many more in the 30 days before it
SYMBOL, DAY = "JPM", "2025-03-05"


def _stockbench_runtime(tmp_path, protocol: Protocol):
    """The services a StockBench run's cycles get: its episode's, as run.py's _run_here builds it, then the backtest's."""
    plan = run.plan("inputs", protocol, [(None, None)], experiments=tmp_path)
    (ep,) = plan.episodes
    config = episode_config(ep)
    return backtest_runtime(config, episode_services(ep, plan.ctx), _sim(config))


def _sim(config: EpisodeConfig) -> SimulationExecution:
    return SimulationExecution.for_market(
        config.market, fees_bps=config.fees_bps, slippage_bps=config.slippage_bps, decide_at=config.decide_at
    )


def _backtest_runtime():
    """A plain `tradegraph backtest` at the open on the same data."""
    config = EpisodeConfig(
        episode_id="plain", tickers=[SYMBOL], initial_cash=100_000, start=DAY, end=DAY, decide_at="open"
    )
    base = default_services(AgentConfig.from_env(), data=DataFiles(**stockbench_files(None).given()))
    return backtest_runtime(config, base, _sim(config))


def _ages_h(items, day: str) -> list[float]:
    opened = decision_time(OPEN, day)
    return [(opened - published_time(i.published_at, OPEN)) / pd.Timedelta(hours=1) for i in items]


def test_a_stockbench_cycles_bundle_holds_at_most_5_items_from_the_48_hours_before_its_open(tmp_path):
    rt = _stockbench_runtime(tmp_path, Protocol(symbols=(SYMBOL,), start=DAY, end=DAY))
    assert rt.config.input_window == STOCKBENCH and rt.profile.decide_at == "open"
    news = rt.bundle(SYMBOL, DAY).news
    assert len(news.items) == 5  # the cap, reached: more than 5 were published in the 48 hours
    ages = _ages_h(news.items, DAY)
    assert all(0 < a <= 48 for a in ages), ages
    # the count and sentiment the agents read are those of the items shown, not of headlines they never see
    assert news.unique_count == 5


def test_a_plain_backtest_keeps_its_30_day_window_of_6_items():
    rt = _backtest_runtime()
    assert rt.config.input_window == TRADEGRAPH and rt.profile.decide_at == "open"
    news = rt.bundle(SYMBOL, DAY).news
    assert len(news.items) == NEWS_ITEMS == 6
    assert news.unique_count > 9  # every unique item of its 30 days is counted
    ages = _ages_h(news.items, DAY)
    assert all(a > 0 for a in ages) and max(ages) <= NEWS_LOOKBACK_DAYS * 24 + 24


def _note(day: str, n: int, session: str) -> MemoryRecord:
    return MemoryRecord(
        memory_id=f"c{n}:cycle:{SYMBOL}",
        kind="cycle",
        symbol=SYMBOL,
        direction="LONG",
        known_at=day,
        session_id=session,
        text=f"{SYMBOL} LONG setup uptrend; conviction 0.6, stop and target; BUY 10; cycle completed.",
    )


@pytest.mark.parametrize("stockbench", [True, False], ids=["stockbench", "plain"])
def test_recall_reaches_back_7_days_in_a_stockbench_run_and_to_any_date_otherwise(stockbench, tmp_path):
    rt = _stockbench_runtime(tmp_path, Protocol(symbols=(SYMBOL,), start=DAY, end=DAY)) if stockbench else None
    settings = rt.config if rt is not None else AgentConfig.from_env()
    store = mock_store()
    session = "bt-s"
    bank = MemoryBank(store.memories)
    as_of = "2025-03-10"
    # 8 days before (out of a 7-day window), 7 days before (its first day), 3 days before, and the day itself
    bank.write(_note(d, n, session) for n, d in enumerate(["2025-03-02", "2025-03-03", "2025-03-07", "2025-03-10"]))
    services = default_services(dataclasses.replace(settings, memory="session", memory_top_k=5), memory=bank)
    recall = recall_for(services, session)
    applied, hits = recall.search(agent="trader", symbol=SYMBOL, query="stop target LONG", as_of=as_of)
    known = sorted(h.known_at for h in hits)
    if stockbench:
        assert known == ["2025-03-03", "2025-03-07"]
        assert applied["known_from"] == "2025-03-03"
    else:
        assert known == ["2025-03-02", "2025-03-03", "2025-03-07"]
        assert "known_from" not in applied  # an ordinary run's retrieval event reads as before


def test_a_stockbench_session_records_its_window_and_verifies_identical(tmp_path):
    """One decision point of the benchmark, in process: its SCANNING bundles hold the protocol's news, its
    manifest the window, and the recording re-executes identically."""
    store = mock_store()
    plan = run.plan("rec", Protocol(symbols=("AAPL", SYMBOL), start=DAY, end=DAY), [(None, None)], experiments=tmp_path)
    run.run(plan, store)
    sid = session_id_of(plan.episodes[0].episode_id)
    events = store.events.read(sid)
    (scan,) = [e["payload"]["data"] for e in events if e["kind"] == "contract" and e["state"] == "SCANNING"]
    for snap in scan["snapshots"]:
        items = snap["bundle"]["news"]["items"]
        assert 0 < len(items) <= 5, snap["symbol"]
        opened = decision_time(OPEN, DAY)
        assert all(opened - pd.Timedelta(hours=48) <= published_time(i["published_at"], OPEN) < opened for i in items)
    manifest = parse_event(next(e for e in events if e["kind"] == "manifest"))
    assert isinstance(manifest, ManifestEvent)
    assert InputWindow.from_dict(manifest.payload.config["input_window"]) == STOCKBENCH
    report = verify_session(store, sid)
    assert report.identical and report.ok, report.first_divergence
    assert not any("input_window" in d for c in report.cycles for d in c.config_differences if "recorded" not in d)


def test_the_window_survives_the_episodes_trip_to_a_ray_worker_and_plain_episodes_hash_as_before(tmp_path):
    """A Ray worker gets each episode as its dict (graph/services/sweep/driver.py): the window comes back whole; an
    ordinary sweep's episode dict has no key for it, so its grid hash (and every sweep resumed by it) is unchanged."""
    plan = run.plan("ray", Protocol(symbols=(SYMBOL,), start=DAY, end=DAY), [(None, None)], experiments=tmp_path)
    (ep,) = plan.episodes
    assert Episode.from_dict(ep.as_dict()) == ep and ep.input_window == STOCKBENCH
    assert "input_window" not in dataclasses.replace(ep, input_window=TRADEGRAPH).as_dict()


def test_the_departures_say_what_a_stockbench_run_now_reads():
    lines = Protocol().departures()
    (news,) = [x for x in lines if x.startswith("news")]
    assert "up to 5 unique items published in the 48 hours before the 09:30 New York open" in news
    assert "30 days" not in " ".join(lines) and "6 items" not in " ".join(lines)
    (recall,) = [x for x in lines if x.startswith("recall")]
    assert "7 calendar days before the decision date" in recall
    # another window is a departure, said with its own numbers
    other = Protocol(input_window=TRADEGRAPH).departures()
    assert (
        "news: up to 6 items from the previous 30 days, the count and sentiment of every item in it; the paper's"
        in (" ".join(other))
    )
    assert any(x.startswith("recall: notes from any earlier date") for x in other)
    # with memory off nothing is recalled: no line says what is recalled
    assert not any(x.startswith("recall") for x in Protocol(memory="off").departures())
