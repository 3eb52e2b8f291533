"""Issue 22 item 4: every number of every own-data file is finite and every bar whole (high at or above open and
close, low at or below them, volume >= 0). A violation is refused by the loaders, by `data check` and by `run`
before anything else, with the file, the row (line, record) and the column (field) named on one line, exit 2."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pandas as pd
import pytest

from agent.data.actions import load_actions
from agent.data.fundamentals import load_fundamentals
from agent.data.market import DataError, load_market_data
from agent.data.news import load_news
from agent.data.sources import load_file
from agent.data.stockbench import cache_dir, load_tree
from tests.unit.stockbench_tree import write_tree

HEADER = "symbol,date,open,high,low,close,volume\n"
GOOD = "ACME,2024-03-01,10,11,9,10.5,1000\n"

# (open, high, low, close, volume) of the second row -> the column named and what is said of it
BAD_BARS = {
    "inf close": (("10", "11", "9", "inf", "5"), "close", "not a finite number (inf)"),
    "-inf open": (("-inf", "11", "9", "10", "5"), "open", "not a finite number (-inf)"),
    "nan close": (("10", "11", "9", "nan", "5"), "close", "missing value (NaN)"),
    "inf volume": (("10", "11", "9", "10", "inf"), "volume", "not a finite number (inf)"),
    "high below low": (("10", "9", "11", "10", "5"), "high", "high 9.0 is below the bar's open or close (10.0)"),
    "high below close": (("10", "10.4", "9", "10.5", "5"), "high", "high 10.4 is below the bar's open or close (10.5)"),
    "low above open": (("10", "11", "10.2", "10.5", "5"), "low", "low 10.2 is above the bar's open or close (10.0)"),
    "negative volume": (("10", "11", "9", "10", "-1"), "volume", "negative volume -1.0"),
}


def _csv(tmp_path: Path, values: tuple[str, ...]) -> Path:
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + GOOD + "ACME,2024-03-04," + ",".join(values) + "\n")
    return p


def _parquet(tmp_path: Path, values: tuple[str, ...]) -> Path:
    rows = [GOOD.strip().split(","), ["ACME", "2024-03-04", *values]]
    df = pd.DataFrame(rows, columns=HEADER.strip().split(","))
    for c in ("open", "high", "low", "close", "volume"):
        df[c] = df[c].astype(float)
    p = tmp_path / "prices.parquet"
    df.to_parquet(p)
    return p


@pytest.mark.parametrize("case", list(BAD_BARS))
@pytest.mark.parametrize("fmt,row", [("csv", 3), ("parquet", 2)])  # a CSV's line (header = 1); Parquet's row
def test_a_bad_bar_is_refused_naming_file_row_and_column(tmp_path, case, fmt, row):
    values, column, what = BAD_BARS[case]
    path = (_csv if fmt == "csv" else _parquet)(tmp_path, values)
    for load in (load_market_data, lambda p: load_file("prices", p)):
        with pytest.raises(DataError) as e:
            load(path)
        assert str(e.value) == f"{path}: row {row}, column '{column}': {what}"


def test_a_whole_bar_at_its_extremes_loads(tmp_path):
    """high == open == close == low, volume 0: nothing to refuse."""
    m = load_market_data(_csv(tmp_path, ("10", "10", "10", "10", "0")))
    assert m.rows("ACME") == 2


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_news_with_a_non_finite_number_is_refused_naming_line_and_field(tmp_path, number):
    p = tmp_path / "news.jsonl"
    p.write_text(
        '{"symbol": "ACME", "published_at": "2024-03-01", "headline": "fine"}\n'
        f'{{"symbol": "ACME", "published_at": "2024-03-02", "headline": "x", "meta": {{"score": {number}}}}}\n'
    )
    for load in (load_news, lambda q: load_file("news", q)):
        with pytest.raises(DataError) as e:
            load(p)
        assert str(e.value) == f"{p}: line 2, field 'meta.score': not a finite number ({number})"


@pytest.mark.parametrize(
    "field,number", [("pe", "NaN"), ("pb", "Infinity"), ("net_margin_pct", "-Infinity"), ("ev_ebitda", "1e999")]
)
def test_fundamentals_with_a_non_finite_number_are_refused_naming_record_and_field(tmp_path, field, number):
    p = tmp_path / "f.json"
    p.write_text(
        '{"source": "t", "records": [{"symbol": "ACME", "as_of": "2023-12-31", "reported_at": "2024-02-01", '
        f'"pe": 12.0}}, {{"symbol": "ACME", "as_of": "2024-03-31", "reported_at": "2024-05-01", '
        f'"{field}": {number}}}]}}'
    )
    for load in (load_fundamentals, lambda q: load_file("fundamentals", q)):
        with pytest.raises(DataError) as e:
            load(p)
        assert (
            str(e.value) == f"{p}: record 2 (ACME, as_of 2024-03-31), field '{field}': not a finite number ({number})"
        )


def test_fundamentals_outside_the_records_are_held_to_it_too(tmp_path):
    p = tmp_path / "f.json"
    p.write_text('{"source": "t", "scale": NaN, "records": []}')
    with pytest.raises(DataError, match=r"f\.json: field 'scale': not a finite number \(NaN\)$"):
        load_fundamentals(p)


def test_corporate_actions_with_a_non_finite_amount_are_refused(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(
        '{"dividends": [{"symbol": "ACME", "ex_dividend_date": "2024-03-05", "cash_amount": Infinity}], "splits": []}'
    )
    with pytest.raises(DataError) as e:
        load_actions(p)
    assert str(e.value) == f"{p}: dividends record 1, field 'cash_amount': not a finite number (Infinity)"


TREE_FAULTS = {
    "inf close": (
        dict(bar={"c": float("inf")}),
        "parquet/ACME/day/2024-03-04.parquet: row 1, column 'close': not a finite number (inf)",
    ),
    "nan high": (
        dict(bar={"h": float("nan")}),
        "parquet/ACME/day/2024-03-04.parquet: row 1, column 'high': missing value (NaN)",
    ),
    "high below low": (
        dict(bar={"h": 8.0}),
        "parquet/ACME/day/2024-03-04.parquet: row 1, column 'high': high 8.0 is below the bar's open or close (11.5)",
    ),
    "news NaN": (
        dict(news_text='{"items": [{"title": "t", "datetime": NaN}]}'),
        "cache/news_by_day/ACME/2024-03-04.json: field 'items[0].datetime': not a finite number (NaN)",
    ),
    "filing Infinity": (
        dict(
            filings_text='[{"end_date": "2023-12-31", "financials": {"income_statement": '
            '{"revenues": {"value": Infinity}}}}]'
        ),
        "cache/financials/ACME.quarterly.json: field '[0].financials.income_statement.revenues.value': "
        "not a finite number (Infinity)",
    ),
}


@pytest.mark.parametrize("case", list(TREE_FAULTS))
def test_a_stockbench_tree_is_held_to_the_same_rules_and_nothing_is_cached(tmp_path, monkeypatch, case):
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    kwargs, where = TREE_FAULTS[case]
    root = write_tree(tmp_path / "sb", **kwargs)
    for load in (load_tree, lambda q: load_file("prices", q)):
        with pytest.raises(DataError) as e:
            load(root)
        assert str(e.value) == f"{root.resolve() / 'storage'}/{where}"
    assert not cache_dir().exists() or not list(cache_dir().iterdir())


# ------------------------------------------------------------------------------------------ the real CLI
def _bad_files(d: Path) -> dict[str, tuple[str, Path, str]]:
    """case -> (flag, path, the error after the path)."""
    d.mkdir()
    csv = _csv(d, ("10", "11", "9", "inf", "5"))
    pq = _parquet(d, ("10", "9", "11", "10", "5"))
    news = d / "news.jsonl"
    news.write_text('{"symbol": "ACME", "published_at": "2024-03-01", "headline": "x", "score": NaN}\n')
    fund = d / "f.json"
    fund.write_text(
        '{"records": [{"symbol": "ACME", "as_of": "2023-12-31", "reported_at": "2024-02-01", "pe": Infinity}]}'
    )
    tree = write_tree(d / "sb", bar={"c": float("-inf")})
    return {
        "csv inf": ("--prices", csv, "row 3, column 'close': not a finite number (inf)"),
        "parquet high<low": ("--prices", pq, "row 2, column 'high': high 9.0 is below the bar's open or close (10.0)"),
        "news NaN": ("--news", news, "line 1, field 'score': not a finite number (NaN)"),
        "fundamentals Infinity": (
            "--fundamentals",
            fund,
            "record 1 (ACME, as_of 2023-12-31), field 'pe': not a finite number (Infinity)",
        ),
        "tree -inf": ("--prices", tree, "row 1, column 'close': not a finite number (-inf)"),
    }


@pytest.mark.integration
def test_data_check_and_run_refuse_it_in_one_line_exit_2_and_write_no_session(
    embedded_uri, tmp_path, monkeypatch, capsys
):
    # in process (`main([...])`): the answer (exit code, stderr, stdout) and the empty database are what is
    # checked, not how a process starts (10 processes here cost 80 s under load)
    from pymongo import MongoClient

    from graph.transports.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    for name in ("MONGODB_URI", "TRADEGRAPH_CONFIG", "TRADEGRAPH_LLM"):
        monkeypatch.delenv(name, raising=False)

    cases = _bad_files(tmp_path / "data")
    db = f"finite_{uuid.uuid4().hex[:8]}"
    jobs = []
    for case, (flag, path, what) in cases.items():
        shown = path.resolve()
        if path.is_dir():  # a tree names the file within it
            shown = shown / "storage" / "parquet" / "ACME" / "day" / "2024-03-04.parquet"
        check_args = ["data", "check", flag, str(path)]
        run_args = [
            "run",
            "--symbols",
            "ACME",
            "--as-of",
            "2024-03-04",
            flag,
            str(path),
            "--db",
            f"{embedded_uri}/{db}",
        ]
        jobs.append((case, "check", check_args, f"tradegraph: error: {flag} {path}: {shown}: {what}\n"))
        jobs.append((case, "run", run_args, f"tradegraph: error: {flag} {path}: {shown}: {what}\n"))
    for case, command, args, line in jobs:
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        assert (case, command, code) == (case, command, 2), err
        assert err == line, (case, command)
        assert out == ""
    client = MongoClient(embedded_uri, serverSelectionTimeoutMS=5000)
    try:
        assert client[db].list_collection_names() == []  # refused before any store write, let alone a session
    finally:
        client.close()


def test_data_check_names_a_bad_file_given_as_its_argument(tmp_path, capsys):
    from graph.transports.cli.main import main

    path = _csv(tmp_path, ("10", "11", "9", "inf", "5"))
    assert main(["data", "check", str(path)]) == 2
    assert capsys.readouterr().err == f"tradegraph: error: {path}: row 3, column 'close': not a finite number (inf)\n"
    news = tmp_path / "n.jsonl"
    news.write_text(
        json.dumps({"symbol": "A", "published_at": "2024-03-01", "headline": "x"})
        + "\n"
        + '{"symbol": "A", "published_at": "2024-03-01", "headline": "y", "w": -Infinity}\n'
    )
    assert main(["data", "check", str(news)]) == 2
    assert capsys.readouterr().err == f"tradegraph: error: {news}: line 2, field 'w': not a finite number (-Infinity)\n"


def test_the_yahoo_fetcher_leaves_out_bars_the_loader_would_refuse():
    """A fetched file is loaded back before it is kept: a bar Yahoo sends broken is left out (and noted), so one
    bad day does not cost the whole fetch."""
    from agent.data.yahoo import _as_price_rows

    days = pd.DatetimeIndex(["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08"], name="Date")
    hist = pd.DataFrame(
        {
            "Open": [10, 10, 10, 10, 10],
            "High": [11, float("inf"), 9.9, 11, 11],
            "Low": [9, 9, 9, 10.1, 9],
            "Close": [10.5, 10.5, 10, 10.5, 10.5],
            "Volume": [5, 5, 5, 5, float("inf")],
            "Adj Close": [10.5] * 5,
        },
        index=days,
    )
    frame, dropped = _as_price_rows("ACME", hist)
    assert dropped == ["2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08"]
    assert frame["date"].tolist() == ["2024-01-02"]
