"""A symbol with no bar on a day (StockBench: 16 of 20 symbols lack 2025-02-11..02-19): it cannot trade that day,
is never filled at a stale price, a held position is valued at its last close, and the gap shows in the Case, the
scan and the next bundle. A standalone run on such a day is refused, naming the nearest bars."""

from __future__ import annotations

import pandas as pd
import pytest

from agent.config import AgentConfig, RiskLimits
from agent.data.market import MarketData
from agent.markets import trading_days
from graph.machine.cycle_context import default_services
from graph.machine.runner import InputError, run_state_machine
from graph.services.backtest.loop import decision_dates, load_logs, run_backtest
from schemas.simulation import EpisodeConfig
from tests.helpers import mock_store
from tests.unit.synthetic_prices import write_prices

GAP = ("2024-11-12", "2024-11-13", "2024-11-14")
BEFORE_GAP, AFTER_GAP = "2024-11-11", "2024-11-15"
RISK = RiskLimits(max_notional_pct=30.0, exposure_cap_pct=100.0)


@pytest.fixture(scope="module")
def gapped(tmp_path_factory) -> MarketData:
    return write_prices(
        tmp_path_factory.mktemp("gap") / "prices.csv",
        ["GAP", "UPA", "UPB"],
        "2024-01-02",
        "2024-12-31",
        gaps={"GAP": set(GAP)},
    )


@pytest.mark.parametrize("decide_at", ["open", "close"])
def test_a_symbol_without_a_bar_sits_the_day_out_valued_at_its_last_close(tmp_path, gapped, decide_at):
    store = mock_store()
    # from a week before the gap (the agent buys GAP) to the first session after it, the last one checked
    cfg = EpisodeConfig(
        episode_id="gap",
        tickers=["GAP", "UPA", "UPB"],
        initial_cash=100_000.0,
        start="2024-11-04",
        end=AFTER_GAP,
        every=1,
        bars_in_case=5,
        decide_at=decide_at,
    )
    res = run_backtest(
        cfg,
        store,
        progress=False,
        services=default_services(AgentConfig(risk=RISK), market=gapped),
        out_dir=tmp_path,
        run_id="gap",
    )
    logs = {lg.date: lg for lg in load_logs(tmp_path / "gap" / "episode_log.jsonl")}
    assert set(GAP) <= set(logs) and res.cycle_statuses == {"completed": len(logs)}  # the other tickers still trade
    last_close = float(gapped.bars("GAP", BEFORE_GAP, BEFORE_GAP).close.iloc[0])
    assert logs[GAP[0]].portfolio_before.quantity("GAP") > 0, "the offline agent holds GAP into the gap"
    manifests = {
        e["payload"]["inputs"]["as_of"]: e["payload"]["inputs"] for e in store.events.read("bt-gap", kind="manifest")
    }
    scans = {
        e["payload"]["data"]["as_of"]: e["payload"]["data"]
        for e in store.events.read("bt-gap", kind="contract")
        if e["state"] == "SCANNING"
    }
    for day in GAP:
        lg = logs[day]
        assert "GAP" not in manifests[day]["symbols"] and "GAP" not in manifests[day]["case"]["tickers"]
        assert "no bar on " + day in manifests[day]["case"]["untradable"]["GAP"]
        assert any(i["content"].startswith("GAP: no bar on") for i in manifests[day]["case"]["case_data"]["items"])
        listed = {u["symbol"]: u for u in scans[day]["untradable"]}
        assert listed["GAP"]["price"] == pytest.approx(last_close, abs=1e-4)
        assert listed["GAP"]["price_date"] == BEFORE_GAP and scans[day]["marks"]["GAP"] == listed["GAP"]["price"]
        # valued at its last close (never its cost), never filled on a day it has no bar
        assert lg.prices["GAP"] == last_close
        held = lg.portfolio_after.positions["GAP"]
        rest = sum(p.quantity * lg.prices[s] for s, p in lg.portfolio_after.positions.items() if s != "GAP")
        assert lg.equity == pytest.approx(lg.portfolio_after.cash + rest + held.quantity * last_close)
        assert held.avg_price != last_close
    fills = [t for lg in logs.values() for t in lg.exits + lg.execution_result.executed_trades]
    assert not [t for t in fills if t.symbol == "GAP" and t.date in GAP]
    # the first decision after the gap shows it in GAP's bundle
    after = next(s for s in scans[AFTER_GAP]["snapshots"] if s["symbol"] == "GAP")
    assert after["bundle"]["missing_sessions"] == list(GAP)
    assert "missing_sessions" not in next(s for s in scans[AFTER_GAP]["snapshots"] if s["symbol"] == "UPA")["bundle"]


def test_a_standalone_run_on_a_missing_bar_is_refused_naming_the_nearest_bars(gapped):
    store = mock_store()
    for decide_at in ("open", "close"):
        with pytest.raises(
            InputError, match=f"no GAP bar on {GAP[1]}.*nearest bars {BEFORE_GAP} before, {AFTER_GAP} after"
        ):
            run_state_machine(
                ["GAP", "UPA"],
                GAP[1],
                store=store,
                services=default_services(AgentConfig(decide_at=decide_at), market=gapped),
            )


def test_decision_dates_are_sessions_on_which_any_ticker_can_trade():
    days = [d.strftime("%Y-%m-%d") for d in trading_days("us_equity", "2024-03-01", "2024-03-15")]
    bar = pd.DataFrame({"open": 1.0, "high": 1.0, "low": 1.0, "close": 1.0, "volume": 1.0}, index=[0])

    def frame(dates):
        return pd.concat([bar] * len(dates)).set_index(pd.DatetimeIndex(dates))

    both_missing = days[4]
    a = [d for d in days if d not in (days[2], both_missing)]
    b = [d for d in days if d not in (days[3], both_missing)]
    market = MarketData({"A": frame(a), "B": frame(b)})
    got = decision_dates(market, ["A", "B"], days[0], days[-1], 1)
    assert got == [d for d in days if d != both_missing]  # one ticker missing: still a point; both: none
    # at the open a ticker's first bar cannot be decided on (no bar before it): the first session is no point
    assert decision_dates(market, ["A", "B"], days[0], days[-1], 1, decide_at="open") == got[1:]
