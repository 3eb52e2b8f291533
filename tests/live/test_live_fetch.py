"""`tradegraph live` without --prices fetches each day's bars itself, through `data fetch`'s source (yfinance, run
for real against tests/live/fake_yahoo.py on a loopback port), before the day's cycle: the cycle reads that file,
the fetch is audited, and a source that fails or lags past the deadline (429, 500, connection refused, bars
stopping early) skips the day with one line, no cycle and no order. Without --news it fetches each symbol's latest
headlines too (yfinance's news stream), kept at their publication times in the --news format, read by the day's
cycle; a news source that fails skips the day as the bars' does. Driven in process by the fake clock."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from database.connection import connect
from graph.machine.recording import load_session_log
from graph.services.broker.live_data import RETRY_S
from graph.transports.cli.main import main
from schemas.events import ValidationEvent, parse_event
from tests.live.fake_yahoo import FakeYahoo, news_article, redirect_session
from tests.live.test_live_loop import Clock, env, live, ny, records  # noqa: F401 - env is a fixture


@pytest.fixture
def yahoo(env, tmp_path, monkeypatch):  # noqa: F811 - the fixture imported above
    import yfinance
    import yfinance.cache
    import yfinance.data

    fake = FakeYahoo().start()
    monkeypatch.setattr(yfinance.data.SingletonMeta, "_instances", {})
    monkeypatch.setattr(yfinance.data, "new_session", lambda: redirect_session(fake.port))
    # yfinance answers a range that ended 30+ days ago from memory when asked again: every range the 2012 clock asks
    monkeypatch.setattr(yfinance.data.YfData, "cache_get", yfinance.data.YfData.get)
    before = yfinance.cache._TzDBManager.get_location()
    yfinance.set_tz_cache_location(str(tmp_path / "yf-cache"))
    yield fake
    fake.stop()
    yfinance.set_tz_cache_location(before)
    assert fake.peers <= {"127.0.0.1"}


def fetches(db: str) -> list[dict]:
    """The audited fetches: `validation` events (check live_data) in the loop's data session, read typed."""
    store = connect(db)
    evs = [parse_event(e) for e in store.events.read("livedata-t")]
    return [e.payload.model_dump(by_alias=True, exclude_unset=True) for e in evs if isinstance(e, ValidationEvent)]


def test_each_day_fetches_its_bars_into_the_loops_folder_and_its_cycle_reads_them(env, yahoo, tmp_path, capsys):
    clock = Clock(ny("2012-07-03", "08:00"))
    assert live(env, clock, "--approve-within", "30m", "--days", "2", prices=False) == 0
    out = capsys.readouterr().out
    recs = records(env)
    assert [r["state"] for r in recs.values()] == ["expired", "expired"], out
    folder = tmp_path / "experiments" / "live-t"
    for day, through in (("2012-07-03", "2012-07-02"), ("2012-07-05", "2012-07-03")):
        data = recs[day]["data"]
        assert data["file"] == str(folder / f"bars-{day}.parquet")
        # no headline in the fake's stream: the day still has its (empty) news file, read by its cycle
        assert recs[day]["files"] == {"prices": data["file"], "news": str(folder / f"news-{day}.jsonl")}
        assert data["through"] == through and data["last_bar"] == {"AAPL": through, "MSFT": through}
        bars = pd.read_parquet(data["file"])
        assert bars.groupby("symbol").date.max().to_dict() == {"AAPL": through, "MSFT": through}
        assert f"{day}: fetched AAPL, MSFT from yfinance through {through} into {data['file']}" in out
    # two symbols a day, each one chart request over the whole look-back, ending the day before the cycle's day
    assert [s for s, _ in yahoo.charts] == ["AAPL", "MSFT", "AAPL", "MSFT"]
    # each day's cycle read that day's file, as fetched: its manifest names the file and its hash
    cycles = load_session_log(connect(env.db), "live-t").cycles
    assert [(c.manifest["data"]["market"]["source"], c.manifest["data"]["market"]["sha256"]) for c in cycles] == [
        (recs[d]["data"]["file"], recs[d]["data"]["sha256"]) for d in sorted(recs)
    ], [c.manifest["data"] for c in cycles]
    audited = fetches(env.db)
    assert [(a["ok"], a["check"], a["day"], a["source"], a["last_bar"]["AAPL"], a["sha256"]) for a in audited] == [
        (True, "live_data", d, "yfinance", recs[d]["data"]["through"], recs[d]["data"]["sha256"]) for d in sorted(recs)
    ]
    assert env.orders == []


@pytest.mark.parametrize("fault", ["429", "500", "refused"])
def test_a_source_failing_past_the_deadline_skips_the_day_with_one_line_no_cycle_no_order(env, yahoo, capsys, fault):
    if fault == "refused":
        yahoo.stop()  # nothing listens on the port any more
    else:
        yahoo.failing = int(fault)
    clock = Clock(ny("2012-07-03", "09:00"))
    assert live(env, clock, "--fetch-within", "10m", "--days", "1", prices=False) == 0
    out = capsys.readouterr().out
    rec = records(env)["2012-07-03"]
    assert (
        rec["state"] == "skipped"
        and "data" not in rec
        and rec["why"].startswith("no fresh bars by 2012-07-03 09:45 EDT: yfinance")
    ), rec
    expected = {"429": "YFRateLimitError", "500": "JSONDecodeError", "refused": "ConnectionError"}[fault]
    assert expected in rec["why"], rec["why"]
    # retried every minute from 09:35 until 09:45, then one line; no cycle ran and nothing reached the broker
    assert rec["attempts"] == 1 + int(600 // RETRY_S)
    assert [s for _, s in clock.slept if s == RETRY_S] == [RETRY_S] * (rec["attempts"] - 1)
    lines = [x for x in out.splitlines() if x.startswith("2012-07-03") and "next run" not in x]
    assert len(lines) == 1 and lines[0].startswith(
        "2012-07-03: skipped, no cycle and no order: no fresh bars by "
        "2012-07-03 09:45 EDT after 11 attempt(s): yfinance"
    ), out
    assert connect(env.db).events.cycle_ids("live-t") == [] and env.orders == [] and env.posts == {}
    assert [(a["ok"], a["attempts"]) for a in fetches(env.db)] == [(False, 11)]
    if fault != "refused":
        assert yahoo.charts == []  # every bar request was refused with the fault


def test_a_source_back_before_the_deadline_runs_the_day_on_fresh_bars(env, yahoo, capsys):
    yahoo.failing = 429

    def recover(c: Clock) -> None:
        if len([s for _, s in c.slept if s == RETRY_S]) == 2:
            yahoo.failing = None

    clock = Clock(ny("2012-07-03", "09:00"))
    clock.on_sleep = recover
    assert live(env, clock, "--fetch-within", "10m", "--approve-within", "5m", "--days", "1", prices=False) == 0
    out = capsys.readouterr().out
    rec = records(env)["2012-07-03"]
    assert rec["state"] == "expired" and rec["attempts"] == 3 and rec["data"]["through"] == "2012-07-02", out
    assert "(3 attempts)" in out and "2012-07-03: running the cycle on bars through 2012-07-02" in out
    assert len(connect(env.db).events.cycle_ids("live-t")) == 1


def test_bars_stopping_before_the_previous_session_are_refused_naming_symbol_and_date(env, yahoo, tmp_path, capsys):
    yahoo.through["MSFT"] = "2012-06-29"  # a lagging source: MSFT's last bar two sessions back
    clock = Clock(ny("2012-07-03", "09:00"))
    assert live(env, clock, "--fetch-within", "2m", "--days", "1", prices=False) == 0
    out = capsys.readouterr().out
    rec = records(env)["2012-07-03"]
    assert rec["state"] == "skipped", rec
    line = [x for x in out.splitlines() if "skipped" in x]
    assert len(line) == 1 and line[0].endswith(
        "yfinance: MSFT: last bar 2012-06-29, not the previous session 2012-07-02: refused"
    ), out
    assert connect(env.db).events.cycle_ids("live-t") == [] and env.orders == []
    assert not (tmp_path / "experiments" / "live-t" / "bars-2012-07-03.parquet").exists()  # refused: never written


def test_without_prices_and_without_yfinance_exit_2_names_the_extra_before_anything_runs(env, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "yfinance", None)  # what `import yfinance` does when it is not installed
    assert main(["live", "--broker", "alpaca", "--symbols", "AAPL", "--db", env.db, "--name", "t"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "without --prices" in err and "pip install 'tradegraph[data]'" in err, err
    assert records(env) == {} and connect(env.db).events.cycle_ids("live-t") == []


NEWS = [  # AAPL's stream as Yahoo lists it, newest first: one after the 2012-07-02 close, an ad, one with no date
    news_article("n3", "Apple shares rise before the open", "2012-07-03T12:30:00Z", "AAPL", "Reuters"),
    {"id": "ad1", "ad": [{"kind": "native"}], "content": {"title": "Buy now", "pubDate": "2012-07-02T15:00:00Z"}},
    news_article("n2", "Apple supplier raises its outlook", "2012-07-02T15:05:00Z", "AAPL", "Bloomberg"),
    {"id": "n0", "content": {"id": "n0", "title": "An item Yahoo gives no time"}},
    news_article("n1", "Apple to hold its developer conference", "2012-06-29T21:10:00Z", "AAPL", "AP"),
]


def test_each_day_fetches_the_latest_headlines_at_their_publication_times_and_its_cycle_reads_them(
    env, yahoo, tmp_path, capsys
):
    import yfinance

    from agent.data.news import load_news

    yahoo.news["AAPL"] = NEWS
    # the fake answers as yfinance's own news call reads it: get_news gives the stream without the ad
    assert [a["id"] for a in yfinance.Ticker("AAPL").get_news()] == ["n3", "n2", "n0", "n1"]
    yahoo.news_asked.clear()
    clock = Clock(ny("2012-07-03", "09:00"))
    assert live(env, clock, "--approve-within", "5m", "--days", "1", prices=False) == 0
    out = capsys.readouterr().out
    rec = records(env)["2012-07-03"]
    folder = tmp_path / "experiments" / "live-t"
    news = rec["data"]["news"]
    assert news["file"] == str(folder / "news-2012-07-03.jsonl"), rec
    assert rec["files"] == {"prices": rec["data"]["file"], "news": news["file"]}
    assert news["headlines"] == {"AAPL": 3, "MSFT": 0} and news["latest"]["AAPL"] == "2012-07-03T12:30:00Z"
    assert news["notes"] == ["AAPL: left out 1 headline(s) without a publication time or a title"]
    assert sorted(yahoo.news_asked) == [("AAPL", 20), ("MSFT", 20)]
    assert "; 3 headline(s) into " + news["file"] in out
    # the file is in the --news format, each line at Yahoo's publication time (never the fetch's)
    rows = [json.loads(line) for line in open(news["file"], encoding="utf-8")]
    assert [(r["id"], r["published_at"], r["source"]) for r in rows] == [
        ("n3", "2012-07-03T12:30:00Z", "Reuters"),
        ("n2", "2012-07-02T15:05:00Z", "Bloomberg"),
        ("n1", "2012-06-29T21:10:00Z", "AP"),
    ]
    assert rows[1] == {
        "symbol": "AAPL",
        "published_at": "2012-07-02T15:05:00Z",
        "headline": "Apple supplier raises its outlook",
        "source": "Bloomberg",
        "summary": "Apple supplier raises its outlook, the summary.",
        "url": "https://finance.yahoo.com/news/n2.html",
        "id": "n2",
        "related_symbols": ["AAPL"],
    }
    # a cycle deciding on 2012-07-02 sees what was out before that day's close, not this morning's headline
    seen = load_news(news["file"]).headlines("AAPL", "2012-07-02")
    assert [h["id"] for h in seen] == ["n1", "n2"]
    # the day's cycle read that file: its manifest names it and its hash; the fetch is audited with it
    (cycle,) = load_session_log(connect(env.db), "live-t").cycles
    assert cycle.manifest["data"]["news"] == {"source": news["file"], "sha256": news["sha256"]}, cycle.manifest
    assert [a["news"]["sha256"] for a in fetches(env.db)] == [news["sha256"]]


def test_a_news_source_failing_past_the_deadline_skips_the_day_no_cycle_no_order(env, yahoo, tmp_path, capsys):
    yahoo.news_failing = 500  # an error answer in JSON: yfinance's get_news alone would read it as no news
    clock = Clock(ny("2012-07-03", "09:00"))
    assert live(env, clock, "--fetch-within", "2m", "--days", "1", prices=False) == 0
    out = capsys.readouterr().out
    rec = records(env)["2012-07-03"]
    assert rec["state"] == "skipped" and "data" not in rec, rec
    assert rec["why"].endswith("yfinance: fetching news of AAPL failed: HTTP 500, not a news stream"), rec["why"]
    assert len([x for x in out.splitlines() if "skipped" in x]) == 1, out
    assert connect(env.db).events.cycle_ids("live-t") == [] and env.orders == []
    folder = tmp_path / "experiments" / "live-t"
    assert not (folder / "news-2012-07-03.jsonl").exists() and not (folder / "bars-2012-07-03.parquet").exists()


def test_a_news_file_given_is_read_as_it_is_and_no_news_is_fetched(env, yahoo, tmp_path, capsys):
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"symbol": "AAPL", "published_at": "2012-06-29", "headline": "Mine"}) + "\n")
    clock = Clock(ny("2012-07-03", "09:00"))
    assert live(env, clock, "--approve-within", "5m", "--days", "1", "--news", str(mine), prices=False) == 0
    rec = records(env)["2012-07-03"]
    assert "news" not in rec["data"] and rec["files"] == {"prices": rec["data"]["file"]}, rec
    assert yahoo.news_asked == [] and not (tmp_path / "experiments" / "live-t" / "news-2012-07-03.jsonl").exists()
    (cycle,) = load_session_log(connect(env.db), "live-t").cycles
    assert cycle.manifest["data"]["news"]["source"] == str(mine.resolve()), cycle.manifest["data"]
