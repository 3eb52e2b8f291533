"""Trading calendars and decision times: a non-trading day is bad input, refused before any model call."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest

from agent.config import AgentConfig
from agent.data.market import NotATradingDayError, default_market_data, validate_as_of
from agent.markets import (
    PROFILES,
    CalendarRangeError,
    decision_time,
    is_trading_day,
    nearest_trading_days,
    trading_days,
)
from agent.offline_model import OfflineChatModel
from database.connection import connect
from graph.machine.cycle_context import default_services
from graph.machine.runner import InputError, run_state_machine
from graph.transports.cli.main import main as cli_main


def _counting_services(market: str = "us_equity"):
    """Services whose model factory records every model the cycle asks for (none may be asked for)."""
    asked: list[str] = []

    def factory(cfg, tier):
        asked.append(tier)
        return OfflineChatModel(model_name=f"offline-{tier}")

    return default_services(AgentConfig(market=market), model_factory=factory), asked


@pytest.mark.parametrize(
    "market,day,before,after",
    [
        ("us_equity", "2012-07-04", "2012-07-03", "2012-07-05"),  # Independence Day, a Wednesday
        ("us_equity", "2012-06-02", "2012-06-01", "2012-06-04"),  # a Saturday
        ("us_equity", "2012-10-29", "2012-10-26", "2012-10-31"),  # closed for hurricane Sandy (two days)
        ("cn_a_share", "2012-10-01", "2012-09-28", "2012-10-08"),  # National Day week: the US data has bars
    ],
)
def test_non_trading_day_is_refused_before_any_model_call(market, day, before, after):
    rt, asked = _counting_services(market)
    store = connect(f"mongomock://cal_{uuid.uuid4().hex[:10]}")
    with pytest.raises(InputError) as e:
        run_state_machine(["AAPL", "MSFT"], day, store=store, services=rt)
    msg = str(e.value)
    assert "\n" not in msg and day in msg and f"{before} before" in msg and f"{after} after" in msg, msg
    assert asked == []  # no model was even built, let alone called
    assert store.events.sessions() == []  # nothing was written: no half-started session


def test_cli_run_on_a_holiday_exits_2_with_one_line(capsys):
    code = cli_main(
        ["run", "--symbols", "AAPL", "--as-of", "2012-07-04", "--db", f"mongomock://cal_{uuid.uuid4().hex[:10]}"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "2012-07-04" in err[0] and "not a trading day for us_equity" in err[0]
    assert "2012-07-03 before" in err[0] and "2012-07-05 after" in err[0]


def test_a_trading_day_without_a_bar_is_refused():
    """Crypto trades every day, but stock data has no weekend bar: deciding would reuse Friday's close."""
    with pytest.raises(
        NotATradingDayError,
        match=r"no AAPL bar on 2012-06-02, a trading day for crypto: "
        r"nearest bars 2012-06-01 before, 2012-06-04 after",
    ):
        validate_as_of(default_market_data(), ["AAPL"], "2012-06-02", "crypto")


def test_vendored_bars_are_exactly_the_nyse_sessions():
    """Refusing non-sessions loses no real bar, and every session in the data's span has one."""
    market = default_market_data()
    for symbol in market.universe():
        first, last = market.date_range(symbol)
        assert market.trading_dates(symbol) == trading_days("us_equity", first, last), symbol


def test_calendar_facts():
    assert not is_trading_day("us_equity", "2012-07-04") and is_trading_day("us_equity", "2012-07-05")
    assert is_trading_day("crypto", "2012-06-02")
    assert nearest_trading_days("cn_a_share", "2013-02-11") == (pd.Timestamp("2013-02-08"), pd.Timestamp("2013-02-18"))
    with pytest.raises(CalendarRangeError, match="outside the cn_a_share calendar"):
        is_trading_day("cn_a_share", "2031-01-02")


@pytest.mark.parametrize(
    "market,day,utc",
    [
        ("us_equity", "2012-06-01", "2012-06-01 20:00"),  # 16:00 EDT
        ("us_equity", "2012-01-10", "2012-01-10 21:00"),  # 16:00 EST
        ("us_equity", "2012-07-03", "2012-07-03 17:00"),  # early close 13:00 EDT
        ("us_equity", "2012-07-04", "2012-07-04 20:00"),  # not a session: the regular close
        ("cn_a_share", "2012-06-01", "2012-06-01 07:00"),  # 15:00 CST
        ("crypto", "2012-06-02", "2012-06-03 00:00"),  # the end of the UTC day
    ],
)
def test_decision_time_is_the_close_in_the_market_timezone(market, day, utc):
    assert decision_time(market, day) == pd.Timestamp(utc)


def test_profile_close_matches_its_calendar():
    """The profile's close time and the exchange calendar's regular close are one fact, said twice."""
    from agent.markets import _calendar

    for p in PROFILES.values():
        if p.calendar:
            ((_, regular),) = _calendar(p.calendar).close_times
            assert pd.Timedelta(hours=regular.hour, minutes=regular.minute) == p.close, p.name
            assert str(_calendar(p.calendar).tz) == p.timezone, p.name


# ---------------------------------------------------------------- deciding at the open (StockBench's protocol)
def test_a_profile_deciding_at_the_open_knows_the_previous_bars_and_nothing_after_the_open():
    from agent.markets import bar_cutoff, decision_time, fill_field, get_profile, visible

    at_open = get_profile("us_equity", "open")
    assert get_profile("us_equity").decide_at == "close"  # the default is unchanged
    # 09:30 New York on 2025-03-03 (EST) is 14:30 UTC; the close 21:00 UTC
    assert str(decision_time(at_open, "2025-03-03")) == "2025-03-03 14:30:00"
    assert str(decision_time("us_equity", "2025-03-03")) == "2025-03-03 21:00:00"
    # the open follows the calendar's summer time too: 13:30 UTC in July
    assert str(decision_time(at_open, "2025-07-03")) == "2025-07-03 13:30:00"
    assert visible("2025-03-03T14:29:59Z", "2025-03-03", at_open)
    assert not visible("2025-03-03T14:30:00Z", "2025-03-03", at_open)
    # a date alone is after that day's close whatever the profile decides: the next session's open sees it
    assert not visible("2025-03-03", "2025-03-03", at_open)
    assert visible("2025-03-03", "2025-03-04", at_open)
    # bars: the open sees the previous day's bar and not its own; the close sees its own
    assert str(bar_cutoff(at_open, "2025-03-03").date()) == "2025-03-02"
    assert str(bar_cutoff("us_equity", "2025-03-03").date()) == "2025-03-03"
    assert (fill_field(at_open), fill_field("us_equity")) == ("open", "close")


def test_an_unknown_decision_time_is_refused_by_name():
    from agent.markets import get_profile

    with pytest.raises(ValueError, match="unknown decision time 'noon'"):
        get_profile("us_equity", "noon")
