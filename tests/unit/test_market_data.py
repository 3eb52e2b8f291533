"""Market, news and fundamentals sources: split adjustment, point-in-time access, loader errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent.data.fundamentals import FundamentalsSource, default_fundamentals, load_fundamentals
from agent.data.market import (
    DataError,
    DateOutOfRangeError,
    MarketData,
    UnknownSymbolError,
    default_market_data,
    load_market_data,
    validate_as_of,
)
from agent.data.news import default_news, load_news

RAW_CSV = Path(__file__).resolve().parents[2] / "agent" / "data" / "stocks.csv.gz"


@pytest.fixture(scope="module")
def market() -> MarketData:
    return default_market_data()


def test_universe_and_columns(market):
    assert market.universe() == ["AAPL", "FB", "GOOG", "IBM", "MSFT"]
    bars = market.bars("AAPL")
    assert list(bars.columns) == ["open", "high", "low", "close", "volume"]
    assert bars.index.name == "date" and isinstance(bars.index, pd.DatetimeIndex)
    assert bars.index.is_monotonic_increasing
    assert all(dt == np.float64 for dt in bars.dtypes)
    assert market.date_range("AAPL") == (pd.Timestamp("2000-03-01"), pd.Timestamp("2013-03-01"))


def test_split_adjustment_is_continuous_across_aapl_2005_split(market):
    raw = pd.read_csv(RAW_CSV)
    raw = raw[raw.Ticker == "AAPL"].set_index("Date")
    raw_drop = raw.loc["2005-02-28", "Close"] / raw.loc["2005-02-25", "Close"] - 1
    assert raw_drop == pytest.approx(-0.496, abs=0.005)
    adj = market.bars("AAPL", "2005-02-25", "2005-02-28")["close"]
    assert abs(adj.iloc[1] / adj.iloc[0] - 1) < 0.15
    # the factor also scales high/low/open consistently and volume inversely
    b = market.bars("AAPL")
    assert (b.high >= b.low).all() and (b.volume >= 0).all()
    factor = b.loc["2005-02-25", "close"] / raw.loc["2005-02-25", "Close"]
    assert b.loc["2005-02-25", "volume"] == pytest.approx(raw.loc["2005-02-25", "Volume"] / factor)


@pytest.mark.parametrize("as_of", ["2005-02-26", "2005-02-27", "2005-02-28", "2008-09-15", "2012-12-25", "2000-03-01"])
def test_as_of_never_returns_a_later_bar(market, as_of):
    bars = market.as_of("AAPL", as_of)
    t = pd.Timestamp(as_of)
    assert bars.index.max() <= t
    full = market.bars("AAPL")
    assert len(bars) == int((full.index <= t).sum())


def test_as_of_weekend_uses_last_friday_and_lookback(market):
    bars = market.as_of("AAPL", "2005-02-27", lookback=5)  # a Sunday
    assert len(bars) == 5
    assert bars.index[-1] == pd.Timestamp("2005-02-25")
    assert market.as_of("AAPL", "1999-06-01").empty


def test_returned_frames_are_copies(market):
    b = market.as_of("AAPL", "2010-01-05")
    b.iloc[-1, 0] = -1.0
    assert market.as_of("AAPL", "2010-01-05").iloc[-1, 0] > 0


def test_trading_dates(market):
    d = market.trading_dates("AAPL", "2005-02-24", "2005-03-01")
    assert [x.strftime("%Y-%m-%d") for x in d] == ["2005-02-24", "2005-02-25", "2005-02-28", "2005-03-01"]


def test_validate_as_of(market):
    # without a market profile only symbols, format and range are checked (a Saturday passes)
    assert validate_as_of(market, ["AAPL", "MSFT"], "2012-06-02") == pd.Timestamp("2012-06-02")
    assert validate_as_of(market, ["AAPL", "MSFT"], "2012-06-01", "us_equity") == pd.Timestamp("2012-06-01")
    with pytest.raises(UnknownSymbolError, match=r"unknown symbol 'XYZ' \(known: AAPL, FB, GOOG, IBM, MSFT\)"):
        validate_as_of(market, ["AAPL", "XYZ"], "2012-06-01")
    with pytest.raises(DataError, match=r"malformed date '2012-13-01' \(expected YYYY-MM-DD\)"):
        validate_as_of(market, ["AAPL"], "2012-13-01")
    with pytest.raises(DataError, match="malformed date"):
        validate_as_of(market, ["AAPL"], "06/01/2012")
    with pytest.raises(
        DateOutOfRangeError, match=r"as-of date 1999-01-01 is outside the data for AAPL \(2000-03-01\.\.2013-03-01\)"
    ):
        validate_as_of(market, ["AAPL"], "1999-01-01")
    with pytest.raises(DateOutOfRangeError, match="FB"):
        validate_as_of(market, ["AAPL", "FB"], "2011-01-03")
    with pytest.raises(UnknownSymbolError):
        market.bars("NOPE")


# ------------------------------------------------------------------ user files

GOOD = """symbol,date,open,high,low,close,volume
AAA,2020-01-02,10,11,9,10.5,1000
AAA,2020-01-03,10.5,11.5,10,11,1200
BBB,2020-01-02,20,21,19,20.5,500
AAA,2020-01-06,11,12,10.5,11.5,900
"""


def _write(tmp_path, text, name="bars.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_load_user_csv_case_insensitive_and_adj_close(tmp_path):
    m = load_market_data(_write(tmp_path, GOOD.replace("symbol,date,open", "Symbol,DATE,Open")))
    assert m.universe() == ["AAA", "BBB"]
    assert m.bars("AAA")["close"].tolist() == [10.5, 11.0, 11.5]
    adj = "symbol,date,open,high,low,close,volume,Adj Close\nAAA,2020-01-02,10,11,9,10,1000,5\nAAA,2020-01-03,10,12,9,11,1000,5.5\n"
    b = load_market_data(_write(tmp_path, adj, "adj.csv")).bars("AAA")
    assert b["close"].tolist() == [5.0, 5.5]
    assert b["high"].tolist() == [5.5, 6.0]
    assert b["volume"].tolist() == [2000.0, 2000.0]


def test_load_user_parquet(tmp_path):
    df = pd.read_csv(_write(tmp_path, GOOD))
    p = tmp_path / "bars.parquet"
    df.to_parquet(p)
    m = load_market_data(p)
    assert m.bars("AAA").index[-1] == pd.Timestamp("2020-01-06")
    df.loc[1, "close"] = 0
    df.to_parquet(p)
    with pytest.raises(DataError, match=r"bars\.parquet: row 2, column 'close': non-positive price"):
        load_market_data(p)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (GOOD.replace(",volume", ",vol"), r"bars\.csv: missing column\(s\) volume"),
        (
            GOOD.replace("AAA,2020-01-06", "AAA,2020-01-01"),
            r"bars\.csv: row 5, column 'date': date 2020-01-01 for AAA is before",
        ),
        (
            GOOD.replace("AAA,2020-01-06", "AAA,2020-01-03"),
            r"bars\.csv: row 5, column 'date': duplicate date 2020-01-03 for AAA",
        ),
        (
            GOOD.replace("10.5,11.5,10,11,", "10.5,11.5,-10,11,"),
            r"bars\.csv: row 3, column 'low': non-positive price -10",
        ),
        (
            GOOD.replace("20,21,19,20.5,500", "20,21,19,,500"),
            r"bars\.csv: row 4, column 'close': missing value \(NaN\)",
        ),
        (
            GOOD.replace("20,21,19,20.5,500", "20,21,19,NaN,500"),
            r"bars\.csv: row 4, column 'close': missing value \(NaN\)",
        ),
        (GOOD.replace("2020-01-03", "2020-02-30"), r"bars\.csv: row 3, column 'date': unparseable date"),
        (GOOD.replace("11,12,10.5,11.5,900", "11,12,10.5,abc,900"), r"bars\.csv: row 5, column 'close': not a number"),
    ],
    ids=[
        "missing-column",
        "unsorted",
        "duplicate",
        "non-positive",
        "nan-empty",
        "nan-literal",
        "bad-date",
        "non-numeric",
    ],
)
def test_loader_errors_name_file_row_and_column(tmp_path, text, pattern):
    with pytest.raises(DataError, match=pattern):
        load_market_data(_write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_market_data(tmp_path / "nope.csv")


# ------------------------------------------------------------------ news + fundamentals


def test_news_is_point_in_time(tmp_path):
    # 2010-01-11 is a Monday: the US close is 16:00 EST = 21:00 UTC
    lines = [
        {"symbol": "AAPL", "published_at": "2010-01-04", "headline": "old", "source": "s"},
        {"symbol": "AAPL", "published_at": "2010-01-11T20:59:00Z", "headline": "before the close", "source": "s"},
        {"symbol": "AAPL", "published_at": "2010-01-11T21:00:00Z", "headline": "at the close", "source": "s"},
        {"symbol": "AAPL", "published_at": "2010-01-11T21:30:00Z", "headline": "after the close", "source": "s"},
        {"symbol": "AAPL", "published_at": "2010-01-11", "headline": "date only", "source": "s"},
        {"symbol": "AAPL", "published_at": "2010-01-12T00:00:01", "headline": "tomorrow", "source": "s"},
        {"symbol": "AAPL", "published_at": "2009-11-01", "headline": "too old", "source": "s"},
        {"symbol": "MSFT", "published_at": "2010-01-05", "headline": "other symbol", "source": "s"},
    ]
    p = tmp_path / "n.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    news = load_news(p)
    got = news.headlines("AAPL", "2010-01-11", lookback_days=30)
    assert [g["headline"] for g in got] == ["old", "before the close"]
    assert set(got[0]) == {"symbol", "published_at", "headline", "source"}
    # the next trading day sees what came after Monday's close, the date-only item included
    nxt = [g["headline"] for g in news.headlines("AAPL", "2010-01-12", lookback_days=30)]
    assert nxt == ["old", "date only", "before the close", "at the close", "after the close", "tomorrow"]
    assert news.headlines("IBM", "2010-01-11") == []


def test_news_close_follows_the_market_profile(tmp_path):
    # 2012-06-01 (Friday): US close 20:00 UTC (EDT), Shanghai close 07:00 UTC, crypto at 24:00 UTC
    items = [
        {"symbol": "X", "published_at": f"2012-06-01T{h}:30:00Z", "headline": f"at {h}:30", "source": "s"}
        for h in ("06", "08", "19", "21", "23")
    ]
    from agent.data.news import NewsSource

    news = NewsSource(items)
    seen = {
        m: [g["headline"] for g in news.headlines("X", "2012-06-01", profile=m)]
        for m in ("us_equity", "cn_a_share", "crypto")
    }
    assert seen == {
        "cn_a_share": ["at 06:30"],
        "us_equity": ["at 06:30", "at 08:30", "at 19:30"],
        "crypto": ["at 06:30", "at 08:30", "at 19:30", "at 21:30", "at 23:30"],
    }


def test_early_close_day_uses_the_early_close():
    from agent.data.news import NewsSource

    # 2012-07-03 closed at 13:00 EDT (17:00 UTC): a 14:00 EDT headline came after that day's close
    news = NewsSource([{"symbol": "X", "published_at": "2012-07-03T14:00:00-04:00", "headline": "late", "source": "s"}])
    assert news.headlines("X", "2012-07-03") == []
    assert [g["headline"] for g in news.headlines("X", "2012-07-05")] == ["late"]


def test_news_malformed_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"symbol":"AAPL","published_at":"2010-01-01","headline":"x","source":"s"}\n{not json\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2"):
        load_news(p)
    p.write_text('{"symbol":"AAPL","published_at":"2010-01-01","source":"s"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 1: missing field\(s\) headline"):
        load_news(p)


def test_sample_news_has_gaps_and_coverage():
    news = default_news()
    assert {"AAPL", "MSFT", "IBM", "GOOG"} <= set(news.symbols())
    assert all(h["source"] == "sample" for h in news.headlines("AAPL", "2013-03-01", lookback_days=5000))
    assert news.headlines("AAPL", "2012-01-31")  # news within 30 days
    assert news.headlines("IBM", "2012-06-15") == []  # none: the sentiment analyst can abstain


def test_fundamentals_point_in_time_and_unavailable():
    f = default_fundamentals()
    a = f.get("AAPL", "2012-06-01")
    assert a.available and a.as_of == "2011-12-31" and a.reported_at == "2012-02-06T21:10:00Z" and a.pe is not None
    assert not f.get("IBM", "2012-06-01").available
    assert not f.get("AAPL", "2001-01-01").available  # before the first record
    src = FundamentalsSource([{"symbol": "X", "as_of": "2010-01-01", "reported_at": "2010-02-01", "pe": 10}])
    assert src.get("X", "2010-02-02").pe == 10.0 and src.get("X", "2010-02-02").pb is None


def test_fundamentals_visible_only_once_reported():
    """Results for a period that ended on 2011-12-31 were filed after the close of 2012-02-06."""
    f = default_fundamentals()
    for day, period in (("2012-01-03", "2010-12-31"), ("2012-02-06", "2010-12-31"), ("2012-02-07", "2011-12-31")):
        assert f.get("AAPL", day).as_of == period, day
    # a date-only filing counts as after that day's close
    src = FundamentalsSource(
        [
            {"symbol": "X", "as_of": "2009-12-31", "reported_at": "2010-02-01", "pe": 1},
            {"symbol": "X", "as_of": "2010-03-31", "reported_at": "2010-05-03", "pe": 2},
        ]
    )
    assert [src.get("X", d).pe for d in ("2010-02-01", "2010-02-02", "2010-05-03", "2010-05-04")] == [None, 1, 1, 2]
    # a restatement of the same period, reported later, replaces the first report once it is public
    src = FundamentalsSource(
        [
            {"symbol": "X", "as_of": "2009-12-31", "reported_at": "2010-02-01", "pe": 1},
            {"symbol": "X", "as_of": "2009-12-31", "reported_at": "2010-06-01T12:00:00Z", "pe": 9},
        ]
    )
    assert src.get("X", "2010-05-28").pe == 1 and src.get("X", "2010-06-01").pe == 9


def test_fundamentals_file_without_reported_at_names_file_and_record(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(
        json.dumps(
            {
                "records": [
                    {"symbol": "X", "as_of": "2010-03-31", "reported_at": "2010-04-30", "pe": 10},
                    {"symbol": "X", "as_of": "2010-06-30", "pe": 11},
                ]
            }
        )
    )
    with pytest.raises(DataError) as e:
        load_fundamentals(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and "record 2 (X, as_of 2010-06-30)" in msg and "reported_at" in msg
    p.write_text(json.dumps({"records": [{"symbol": "X", "as_of": "2010-06-30", "reported_at": "2010-05-01"}]}))
    with pytest.raises(
        DataError, match=r"record 1 \(X, as_of 2010-06-30\): reported_at 2010-05-01 is before the period end"
    ):
        load_fundamentals(p)
    p.write_text(json.dumps({"records": [{"symbol": "X", "as_of": "2010-06-30", "reported_at": "soon"}]}))
    with pytest.raises(
        DataError, match=r"record 1 \(X, as_of 2010-06-30\), field 'reported_at': unparseable date 'soon'"
    ):
        load_fundamentals(p)


def test_every_sample_fundamental_is_reported_30_to_45_days_after_its_period():
    doc = json.loads((RAW_CSV.parent / "sample_fundamentals.json").read_text())
    for rec in doc["records"]:
        lag = (pd.Timestamp(rec["reported_at"][:10]) - pd.Timestamp(rec["as_of"])).days
        assert 30 <= lag <= 46, rec


def test_fundamentals_bad_file(tmp_path):
    p = tmp_path / "f.json"
    p.write_text('{"records": [{"symbol": "X", "as_of": "2010-13-01", "reported_at": "2011-01-01"}]}')
    with pytest.raises(DataError, match=r"record 1 \(X, as_of 2010-13-01\), field 'as_of'"):
        load_fundamentals(p)
