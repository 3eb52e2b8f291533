"""`tradegraph data fetch --source yfinance` against recorded Yahoo responses, with no network: yfinance runs for
real (its HTTP session is the recording, tests/fixtures/recorded_http.py), so its request building, parsing and
adjustments are exercised; and `tradegraph data check`."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from agent.data.market import load_market_data
from graph.transports.cli.main import main
from tests.fixtures.recorded_http import recorded_session

FETCH = ["data", "fetch", "--source", "yfinance", "--symbols", "ACME", "--start", "2024-01-02", "--end", "2024-01-31"]


@pytest.fixture
def yahoo(monkeypatch, tmp_path):
    """yfinance with a fresh YfData whose session is the recording, and its caches in tmp_path."""
    import yfinance
    import yfinance.cache
    import yfinance.data

    session, adapter = recorded_session()
    monkeypatch.setattr(yfinance.data.SingletonMeta, "_instances", {})
    monkeypatch.setattr(yfinance.data, "new_session", lambda: session)
    before = yfinance.cache._TzDBManager.get_location()
    yfinance.set_tz_cache_location(str(tmp_path / "yf-cache"))
    yield adapter
    yfinance.set_tz_cache_location(before)


def test_fetch_writes_the_documented_format_adjusted_like_the_bundled_data(yahoo, tmp_path, capsys):
    out = tmp_path / "acme.parquet"
    assert main([*FETCH, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert yahoo.unrecorded == []
    # yfinance asked Yahoo for exactly the range given: local midnights, the end day included (Yahoo's is exclusive)
    chart = [p for m, u, p in yahoo.asked if u.endswith("/v8/finance/chart/ACME") and "period1" in p]
    assert chart == [
        {
            "period1": "1704171600",
            "period2": "1706763600",
            "interval": "1d",
            "includePrePost": "False",
            "events": "div,splits,capitalGains",
        }
    ]
    raw = pd.read_parquet(out)
    assert list(raw.columns) == ["symbol", "date", "open", "high", "low", "close", "volume", "adj_close"]
    # 21 sessions recorded: the all-null one dropped by yfinance, the one without a close by us, and said so
    assert len(raw) == 19 and "2024-01-24" not in set(raw.date) and "2024-01-25" not in set(raw.date)
    assert "left out 1 incomplete bar(s)" in printed and "first 2024-01-25" in printed
    assert f"wrote {out}: 19 daily bars from yfinance" in printed and "ACME" in printed
    first = raw.iloc[0]
    assert (first.date, first.close, first.volume) == ("2024-01-02", 50.21, 1_200_000)
    # before the 2024-01-16 ex-date Yahoo's adjusted close is below its close; from it on they agree
    assert first.adj_close == pytest.approx(50.21 * (1 - 0.25 / 50.86), abs=1e-6)
    on_ex = raw[raw.date == "2024-01-16"].iloc[0]
    assert on_ex.adj_close == on_ex.close
    # the loader every run uses adjusts with adj_close / close, exactly as it does the bundled data
    bars = load_market_data(out).bars("ACME")
    assert bars.loc["2024-01-02", "close"] == pytest.approx(first.adj_close)
    assert bars.loc["2024-01-02", "open"] == pytest.approx(first.open * first.adj_close / first.close)
    assert bars.loc["2024-01-16", "close"] == on_ex.close


def test_a_fetched_file_feeds_a_run(yahoo, tmp_path, capsys):
    out = tmp_path / "acme.csv"
    assert main([*FETCH, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["features", "ACME", "--as-of", "2024-01-31", "--prices", str(out), "--json"]) == 0
    assert '"symbol":"ACME"' in capsys.readouterr().out


def test_an_unknown_symbol_is_one_line_exit_2(yahoo, tmp_path, capsys):
    out = tmp_path / "nope.parquet"
    assert main([*FETCH[:5], "NOPE", *FETCH[6:], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "tradegraph: error: yfinance: no daily bars for NOPE in 2024-01-02..2024-01-31: Yahoo does "
        "not know the symbol (HTTP 404)"
    )
    assert not out.exists() and not list(tmp_path.glob(".part-*"))


def test_no_answer_is_a_failure_not_bad_input(yahoo, tmp_path, capsys):
    # nothing recorded for ZZZZ: the transport fails as a dropped connection would
    assert main([*FETCH[:5], "ZZZZ", *FETCH[6:], "--out", str(tmp_path / "z.parquet")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tradegraph: error: yfinance: fetching ZZZZ failed: ConnectionError") and "\n" not in err


def test_without_yfinance_exit_2_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "yfinance", None)  # what `import yfinance` does when it is not installed
    assert main([*FETCH, "--out", str(tmp_path / "a.parquet")]) == 2
    assert capsys.readouterr().err.strip() == (
        "tradegraph: error: --source yfinance needs the 'data' extra: pip install 'tradegraph[data]'"
    )


@pytest.mark.parametrize(
    "change,line",
    [
        (["--out", "acme.xlsx"], "--out acme.xlsx: unsupported file type (use .parquet, .pq, .csv or .csv.gz)"),
        (["--start", "2024-02-30"], "--start: malformed date '2024-02-30' (expected YYYY-MM-DD)"),
        (["--start", "2024-02-01"], "--start 2024-02-01 is after --end 2024-01-31"),
    ],
)
def test_bad_flags_exit_2_before_any_request(yahoo, capsys, change, line):
    argv = [*FETCH, "--out", "acme.parquet"]
    flag = change[0]
    argv[argv.index(flag) + 1] = change[1]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"tradegraph: error: {line}"
    assert yahoo.asked == []


def test_check_prints_symbols_ranges_and_calendar_gaps(tmp_path, capsys):
    days = ["2024-07-01", "2024-07-02", "2024-07-03", "2024-07-04", "2024-07-08"]  # 07-04 closed, 07-05 missing
    f = tmp_path / "mine.csv"
    f.write_text("symbol,date,open,high,low,close,volume\n" + "".join(f"ZZ,{d},10,11,9,10.5,100\n" for d in days))
    assert main(["data", "check", str(f)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"prices {f}: 1 symbol(s)",
        "  ZZ            5 bars 2024-07-01..2024-07-08; us_equity: 1 bar(s) on closed days (first 2024-07-04), "
        "1 session(s) without a bar (first 2024-07-05)",
    ]
    news = tmp_path / "n.jsonl"
    news.write_text(
        '{"symbol": "ZZ", "published_at": "2024-07-02", "headline": "a"}\n'
        '{"symbol": "ZZ", "published_at": "2024-07-08T13:00:00Z", "headline": "b"}\n'
    )
    assert main(["data", "check", str(news)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"news {news}: 1 symbol(s), 2 headlines",
        "  ZZ            2 headlines, published 2024-07-02..2024-07-08T13:00:00Z",
    ]
    assert main(["data", "check", str(tmp_path / "mine.txt")]) == 2
    assert "cannot tell prices, news or fundamentals from its name: add --kind" in capsys.readouterr().err
    f.write_text("symbol,date,open,high,low,close,volume\nZZ,2024-07-01,10,11,9,-1,100\n")
    assert main(["data", "check", str(f)]) == 2
    assert capsys.readouterr().err.strip() == f"tradegraph: error: {f}: row 2, column 'close': non-positive price -1.0"
