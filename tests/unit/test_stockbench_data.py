"""The StockBench reader against the data shipped with tradegraph (agent/data/stockbench/storage.tar.gz): counts and
gaps, news at its true publication time and counted once, filings public from their acceptance, fundamentals
computed by code (checked here by hand from the filings' own numbers), dividends in a window, a missing bar that
stays missing; and a small tree of our own for what the shipped one cannot show (a folder, a changed file, the
cache, the run manifest)."""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest

from agent.data.market import DataError, NotATradingDayError, validate_as_of
from agent.data.sources import DataFiles, load_file, load_sources, stockbench_files
from agent.data.stockbench import SHIPPED_ARCHIVE, cache_file, load_tree, tree_sha256
from agent.data.stockbench import _load as loaded_trees
from agent.markets import get_profile
from tests.unit.stockbench_tree import write_tree

OPEN = get_profile("us_equity", decide_at="open")
CLOSE = get_profile("us_equity")
DJIA20 = ("AAPL AMGN AMZN AXP BA CAT CRM GS HD HON IBM JNJ JPM MCD MSFT PG SHW TRV UNH V").split()
FULL = {"GS", "HD", "MSFT", "V"}  # the four with 154 bars
FEB_GAP = ["2025-02-11", "2025-02-12", "2025-02-13", "2025-02-14", "2025-02-18", "2025-02-19"]
# items per symbol in the files (the research brief's table) and what is left once each item counts once
RAW_NEWS = dict(
    AAPL=371,
    AMGN=246,
    AMZN=364,
    AXP=274,
    BA=318,
    CAT=204,
    CRM=292,
    GS=342,
    HD=257,
    HON=191,
    IBM=299,
    JNJ=318,
    JPM=333,
    MCD=258,
    MSFT=365,
    PG=228,
    SHW=151,
    TRV=124,
    UNH=297,
    V=291,
)


@pytest.fixture(scope="module")
def sb(tmp_path_factory):
    """The shipped tree, derived once into a home of this module's own (the first load is the cold one)."""
    import os

    home = tmp_path_factory.mktemp("home")
    before = os.environ.get("TRADEGRAPH_HOME")
    os.environ["TRADEGRAPH_HOME"] = str(home)
    loaded_trees.cache_clear()  # another module may have loaded it in its own home: this one's load is cold
    try:
        yield load_tree()
    finally:
        if before is None:
            os.environ.pop("TRADEGRAPH_HOME")
        else:
            os.environ["TRADEGRAPH_HOME"] = before


def test_bars_per_symbol_and_the_gaps(sb):
    m = sb.market
    assert m.universe() == sorted([*DJIA20, "SPY"])
    assert {s: m.rows(s) for s in DJIA20} == {s: 154 if s in FULL else 148 for s in DJIA20}
    assert m.rows("SPY") == 14
    full = {str(d.date()) for d in m.trading_dates("GS")}
    for s in DJIA20:
        lacks = sorted(full - {str(d.date()) for d in m.trading_dates(s)})
        assert lacks == ([] if s in FULL else FEB_GAP), s
    # split-adjusted, not dividend-adjusted: the printed close (a dividend-adjusted one would be ~237.5)
    assert m.bars("AAPL", "2025-03-03", "2025-03-03")["close"].tolist() == [238.03]


def test_a_missing_bar_stays_missing(sb):
    m = sb.market
    assert m.bars("AAPL", "2025-02-12", "2025-02-12").empty and not m.bars("GS", "2025-02-12", "2025-02-12").empty
    assert str(m.as_of("AAPL", "2025-02-12").index[-1].date()) == "2025-02-10"  # the last real bar, not a filled one
    with pytest.raises(
        NotATradingDayError,
        match="no AAPL bar on 2025-02-12, a trading day for us_equity: nearest "
        "bars 2025-02-10 before, 2025-02-20 after",
    ):
        validate_as_of(m, ["AAPL"], "2025-02-12", CLOSE)


def test_news_counts_and_each_item_once(sb):
    assert {s: raw for s, (raw, _) in sb.news_counts.items()} == RAW_NEWS
    assert sum(RAW_NEWS.values()) == 5523
    kept = {s: n for s, (n, _, _) in sb.news.coverage().items()}
    assert kept == {**RAW_NEWS, "JNJ": 317}  # one press release both feeds carried, at the same true time
    tar200 = [h for h in sb.news.headlines("JNJ", "2025-04-28", 5, CLOSE) if "80 percent" in h["headline"]]
    assert [(h["published_at"], h["source"]) for h in tar200] == [("2025-04-26T18:00:00Z", "GlobeNewswire Inc.")]


def test_news_is_seen_from_its_true_time(sb):
    """Labelled 2025-03-03T22:56:22 in the file (the collector's UTC+8), published 14:56:22Z: after that day's open
    (14:30Z), before its close."""

    def tsmc(day, profile):
        return [h for h in sb.news.headlines("AAPL", day, 3, profile) if h["headline"].startswith("Giant chipmaker")]

    assert tsmc("2025-03-03", OPEN) == []
    [item] = tsmc("2025-03-04", OPEN)
    assert item["published_at"] == "2025-03-03T14:56:22Z" and item["id"] == "132959604"
    assert item["summary"].startswith("WASHINGTON") and item["source"] == "Finnhub"
    assert len(tsmc("2025-03-03", CLOSE)) == 1  # a decision at that day's close already knows it


def test_a_filing_is_public_from_its_acceptance(sb):
    """AAPL's quarter ending 2025-06-28 was accepted 2025-08-01T10:00:42Z, before that day's open."""
    f = sb.fundamentals
    ends = lambda day, p: [str(q.end.date()) for q in f.visible("AAPL", day, p)]  # noqa: E731
    assert "2025-06-28" not in ends("2025-07-31", CLOSE) and ends("2025-07-31", CLOSE)[-1] == "2025-03-29"
    got = f.get("AAPL", "2025-08-01", OPEN)
    assert (got.as_of, got.reported_at) == ("2025-06-28", "2025-08-01T10:00:42Z")
    # a fourth quarter has no filing of its own: public with its 10-K (accepted 2024-11-01T10:01:36Z)
    assert "2024-09-28" not in ends("2024-10-31", CLOSE) and ends("2024-11-01", OPEN)[-1] == "2024-09-28"


def test_fundamentals_by_hand_for_aapl_on_2025_05_05(sb):
    """The decision at the 2025-05-05 open knows the 10-Q accepted 2025-05-02T10:00:46Z and the close of 05-02.
    Figures from the four filings (Q3 FY24, Q4 FY24 from the 10-K, Q1 and Q2 FY25), read off the archive below."""
    eps = [1.40, 0.97, 2.40, 1.65]
    revenue = [85_777e6, 94_930e6, 124_300e6, 95_359e6]
    gross = [39_678e6, 43_879e6, 58_275e6, 44_867e6]
    net = [21_448e6, 14_736e6, 36_330e6, 24_780e6]
    revenue_a_year_before = 90_753e6  # the quarter ending 2024-03-30
    equity, shares = 66_796e6, 14_994_082_000  # the latest quarter's parent equity and basic average shares
    raw = _quarters("AAPL")
    assert [
        raw[e]["diluted_earnings_per_share"] for e in ("2024-06-29", "2024-09-28", "2024-12-28", "2025-03-29")
    ] == pytest.approx(eps)
    assert raw["2025-03-29"]["revenues"] == revenue[-1] and raw["2024-03-30"]["revenues"] == revenue_a_year_before
    assert raw["2025-03-29"]["equity_attributable_to_parent"] == equity
    assert raw["2025-03-29"]["basic_average_shares"] == shares

    price = float(sb.market.bars("AAPL", "2025-05-02", "2025-05-02")["close"].iloc[0])
    f = sb.fundamentals.get("AAPL", "2025-05-05", OPEN)
    assert (f.as_of, f.reported_at, f.price, f.price_date) == (
        "2025-03-29",
        "2025-05-02T10:00:46Z",
        price,
        "2025-05-02",
    )
    assert f.eps_ttm == pytest.approx(6.42)
    assert f.pe == round(price / 6.42, 2)
    assert f.pb == round(price / (equity / shares), 2)
    assert f.gross_margin_pct == round(100 * sum(gross) / sum(revenue), 2)
    assert f.net_margin_pct == round(100 * sum(net) / sum(revenue), 2)
    assert f.revenue_growth_pct == round(100 * (revenue[-1] / revenue_a_year_before - 1), 2)
    # the day before, at the close: the same quarter is not public yet, so the figures are the previous ones
    assert sb.fundamentals.get("AAPL", "2025-05-01", CLOSE).as_of == "2024-12-28"


def test_no_figure_from_what_a_filing_lacks(sb):
    v = sb.fundamentals.get("V", "2025-03-03", OPEN)
    assert v.available and v.eps_ttm is None and v.pe is None and v.net_margin_pct is not None  # no diluted EPS
    mcd = sb.fundamentals.get("MCD", "2025-03-03", OPEN)
    assert mcd.pe is not None and mcd.pb is None  # negative equity
    cat = sb.fundamentals.get("CAT", "2025-03-03", OPEN)  # its Q2 2024 has no filing time: no four quarters
    assert cat.pe is None and cat.eps_ttm is None and cat.pb is not None
    assert sb.fundamentals.left_out() == {
        "CAT": ["Q2 2024 (ending 2024-06-30)"],
        "CRM": ["Q1 2025 (ending 2024-04-30)"],
    }
    assert not sb.fundamentals.get("AAPL", "2013-01-02", CLOSE).available


def test_dividends_in_a_window_and_splits_never_reapplied(sb):
    a = sb.actions
    assert [(d.ex_date, d.cash_amount, d.pay_date) for d in a.dividends("HD", "2025-02-28", "2025-06-30")] == [
        ("2025-03-13", 2.30, "2025-03-27"),
        ("2025-06-05", 2.30, "2025-06-18"),
    ]
    # `after` is exclusive, `through` inclusive: MCD's 2025-03-03 ex-date belongs to the window that ends on it
    assert [d.ex_date for d in a.dividends("MCD", "2025-03-03", "2025-06-02")] == ["2025-06-02"]
    assert [d.ex_date for d in a.dividends("MCD", "2025-03-02", "2025-03-03")] == ["2025-03-03"]
    window = [(s, d.ex_date) for s in DJIA20 for d in a.dividends(s, "2025-02-28", "2025-06-30")]
    assert len(window) == 24
    # a dividend before a split is paid per pre-split share: per share of today's bars it is divided by 7 and 4
    [old] = a.dividends("AAPL", "2012-08-08", "2012-08-09")
    assert old.cash_amount == 2.65 and old.per_share == pytest.approx(2.65 / 28)
    [split] = a.splits("AAPL", "2020-01-01", "2020-12-31")
    assert (split.execution_date, split.ratio) == ("2020-08-31", 4.0)
    assert all(not a.splits(s, "2024-12-01", "2025-07-31") for s in DJIA20)


def test_one_path_gives_every_kind(sb):
    files = stockbench_files()
    assert files == DataFiles(
        **{k: str(SHIPPED_ARCHIVE.resolve()) for k in ("prices", "news", "fundamentals", "corporate_actions")}
    )
    sources = load_sources(files)
    assert sources == {"market": sb.market, "news": sb.news, "fundamentals": sb.fundamentals, "actions": sb.actions}
    assert load_file("news", SHIPPED_ARCHIVE) is sb.news


def test_the_manifest_records_the_archive_by_its_sha256(sb):
    from graph.machine.manifest import _data_source

    sha = hashlib.sha256(SHIPPED_ARCHIVE.read_bytes()).hexdigest()
    for source in (sb.market, sb.news, sb.fundamentals, sb.actions):
        assert _data_source(source) == {"source": str(SHIPPED_ARCHIVE.resolve()), "sha256": sha}
    assert cache_file(sha).is_file()  # the derived copy, keyed by that hash


def test_a_folder_tree_its_hash_a_change_and_the_cache(tmp_path, monkeypatch):
    from graph.machine.manifest import _data_source, recorded_sources

    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    root = write_tree(tmp_path / "checkout")
    sb = load_tree(root)
    assert sb.market.rows("ACME") == 3 and sb.news_counts == {"ACME": (2, 1)}  # Finnhub and Polygon: one item
    [item] = sb.news.headlines("ACME", "2024-03-05", 5, CLOSE)
    assert item["published_at"] == "2024-03-04T15:00:00Z"  # the epoch, not the +8h label
    entry = _data_source(sb.market)
    assert entry == {"source": str(root.resolve()), "sha256": tree_sha256(root)} and entry["sha256"] == sb.sha256
    assert load_tree(root / "storage").sha256 == sb.sha256  # DIR or DIR/storage: the same files, the same hash
    cached = cache_file(sb.sha256)
    assert cached.is_file()

    # a fresh process (no loaded tree) reads the cache: a cache with other content proves it was read
    doc = json.loads(cached.read_text())
    doc["news"]["ACME"][0]["headline"] = "from the cache"
    cached.write_text(json.dumps(doc))
    loaded_trees.cache_clear()
    assert load_tree(root).news.headlines("ACME", "2024-03-05", 5, CLOSE)[0]["headline"] == "from the cache"

    sources, lines = recorded_sources({"market": entry})
    assert lines == [] and sources["market"].rows("ACME") == 3
    # change one bar: a new hash, a difference line, and the replay may not read it
    write_tree(root, bar={"c": 11.0})
    assert tree_sha256(root) != entry["sha256"]
    sources, lines = recorded_sources({"market": entry})
    assert lines == [
        f"data source market.sha256: content hash differs: {root.resolve()} changed since the run "
        f"(recorded {entry['sha256'][:12]}…, now {tree_sha256(root)[:12]}…)"
    ]
    with pytest.raises(DataError, match="changed since the run"):
        sources["market"].rows("ACME")
    assert load_tree(root).market.bars("ACME", "2024-03-04", "2024-03-04")["close"].tolist() == [11.0]


def test_an_item_whose_hour_is_unknown_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    root = write_tree(
        tmp_path / "sb", news_text=json.dumps({"items": [{"title": "t", "published_utc": "2024-03-04T23:00:00"}]})
    )
    with pytest.raises(DataError) as e:
        load_tree(root)
    assert str(e.value) == (
        f"{root.resolve()}/storage/cache/news_by_day/ACME/2024-03-04.json: items[0]: published_utc "
        "'2024-03-04T23:00:00' has no time zone and there is no 'datetime' epoch: its true "
        "publication time is unknown (a Finnhub label is the collector's local time)"
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("acceptance_datetime", "2023-12-15T21:00:00Z"),
        ("acceptance_datetime", "2023-12-31T21:00:00Z"),
        ("filing_date", "2023-11-20"),
    ],
)
def test_a_filing_public_before_its_own_period_ends_is_refused_naming_file_and_record(
    tmp_path, monkeypatch, field, value
):
    """Issue 28: a quarter ending 2023-12-31 accepted (or, without an acceptance, filed) on or before that day."""
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    good = {
        "start_date": "2022-10-01",
        "end_date": "2022-12-31",
        "acceptance_datetime": "2023-02-01T21:00:00Z",
        "fiscal_period": "Q4",
        "fiscal_year": "2022",
        "financials": {},
    }
    bad = {
        "start_date": "2023-10-01",
        "end_date": "2023-12-31",
        "fiscal_period": "Q4",
        "fiscal_year": "2023",
        "financials": {},
        field: value,
    }
    root = write_tree(tmp_path / "sb", filings_text=json.dumps([good, bad]))
    with pytest.raises(DataError) as e:
        load_tree(root)
    assert str(e.value) == (
        f"{root.resolve()}/storage/cache/financials/ACME.quarterly.json: record 2: {field} {value} "
        f"is not after the period it reports ends (end_date 2023-12-31): a filing is accepted "
        f"after its period"
    )


def test_a_folder_that_is_no_tree_and_an_archive_without_bars(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a regular file, nor a StockBench data tree"):
        load_file("prices", tmp_path / "empty")
    bogus = tmp_path / "other.tar.gz"
    with tarfile.open(bogus, "w:gz") as tar:
        tar.add(SHIPPED_ARCHIVE.with_name("NOTICE.md"), arcname="storage/NOTICE.md")
    with pytest.raises(DataError, match="no StockBench bars in it"):
        load_file("news", bogus)


def _quarters(symbol: str) -> dict[str, dict[str, float]]:
    """period end -> statement line -> value, read straight from the archive's quarterly filings."""
    with tarfile.open(SHIPPED_ARCHIVE) as tar:
        records = json.load(tar.extractfile(f"storage/cache/financials/{symbol}.quarterly.json"))
    return {
        r["end_date"]: {k: v["value"] for part in r["financials"].values() for k, v in part.items()} for r in records
    }


def test_data_check_reports_the_tree_named_by_the_toml_or_the_flag(sb, tmp_path, monkeypatch, capsys):
    from graph.transports.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRADEGRAPH_CONFIG", raising=False)
    (tmp_path / "tradegraph.toml").write_text("[data]\nstockbench = true\n")
    assert main(["data", "check"]) == 0
    toml_out = capsys.readouterr().out
    assert main(["data", "check", "--stockbench"]) == 0
    assert capsys.readouterr().out == toml_out  # one report, though three kinds read the tree
    lines = toml_out.splitlines()
    assert lines[0] == f"StockBench data {SHIPPED_ARCHIVE.resolve()} (sha256 {sb.sha256[:12]}…): 21 symbol(s)"
    assert (
        "  AAPL        148 bars 2024-12-13..2025-07-31; us_equity: every bar on a session, 8 session(s) without a "
        "bar (2025-01-10..2025-01-13 (2), 2025-02-11..2025-02-19 (6))" in lines
    )
    assert "news: 5,523 items, 1 duplicate(s) dropped, 5,522 kept (at their true publication time, UTC)" in lines
    assert "filings: 998 quarters with a public time, 2 left out (no filing or acceptance time)" in lines
    assert any(line.startswith("corporate actions: 1,450 dividends, 13 splits") for line in lines)

    # a kind named beside the tree wins for that kind; a tree key that is no path is one line, exit 2
    (tmp_path / "n.jsonl").write_text('{"symbol": "AAPL", "published_at": "2025-03-03", "headline": "mine"}\n')
    (tmp_path / "tradegraph.toml").write_text('[data]\nstockbench = true\nnews = "n.jsonl"\n')
    assert main(["data", "check"]) == 0
    out = capsys.readouterr().out
    assert f"news {(tmp_path / 'n.jsonl').resolve()}: 1 symbol(s), 1 headlines" in out and "StockBench data" in out
    (tmp_path / "tradegraph.toml").write_text("[data]\nstockbench = 3\n")
    assert main(["data", "check"]) == 2
    assert capsys.readouterr().err == (
        "tradegraph: error: tradegraph.toml: [data] stockbench = 3: expected a StockBench folder or archive, or true\n"
    )


def test_a_bundle_on_the_tree_through_the_kernel_carries_the_computed_fundamentals(sb, tmp_path, monkeypatch, capsys):
    """The kernel's data fields as they are today, each naming the tree: bars, headlines and filings all from it."""
    from graph.transports.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRADEGRAPH_CONFIG", raising=False)
    (tmp_path / "tradegraph.toml").write_text("[data]\nstockbench = true\n")
    assert main(["features", "AAPL", "--as-of", "2025-03-03", "--json"]) == 0
    bundle = json.loads(capsys.readouterr().out)
    assert bundle["technical"]["close"] == 238.03 and bundle["news"]["unique_count"] > 0
    f = bundle["fundamentals"]
    expected = sb.fundamentals.get("AAPL", "2025-03-03", CLOSE).model_dump(mode="json", exclude_none=True)
    assert {k: v for k, v in f.items() if v is not None} == expected
    assert (f["as_of"], f["reported_at"], f["price_date"], f["price"]) == (
        "2024-12-28",
        "2025-01-31T11:01:27Z",
        "2025-03-03",
        238.03,
    )


def test_a_cycle_on_the_tree_records_it_and_replays_identical(sb, tmp_path, monkeypatch, capsys):
    import uuid

    from graph.transports.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRADEGRAPH_CONFIG", raising=False)
    (tmp_path / "tradegraph.toml").write_text("[data]\nstockbench = true\n")
    db = ["--db", f"mongomock://sb_{uuid.uuid4().hex[:8]}"]
    assert main(["run", "--symbols", "AAPL", "--as-of", "2025-03-03", "--json", *db]) == 0
    session = json.loads(capsys.readouterr().out)["session_id"]
    from database.connection import connect

    [manifest] = [e["payload"] for e in connect(db[1]).events.read(session, kind="manifest")]
    entry = {"source": str(SHIPPED_ARCHIVE.resolve()), "sha256": sb.sha256}
    assert manifest["data"] == {"market": entry, "news": entry, "fundamentals": entry}
    (tmp_path / "tradegraph.toml").unlink()  # the replay reads what the manifest names, nothing else
    assert main(["replay", session, "--verify", *db]) == 0
    out = capsys.readouterr().out
    assert "IDENTICAL" in out and "replay identical to the recording" in out and "data source" not in out


def test_a_tree_reads_nothing_beyond_it_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    root = write_tree(tmp_path / "sb")
    outside = tmp_path / "secret.json"
    outside.write_text('{"items": []}')
    link = root / "storage" / "cache" / "news_by_day" / "ACME" / "2024-03-06.json"
    link.symlink_to(outside)
    with pytest.raises(DataError) as e:
        load_tree(root)
    assert str(e.value) == f"{link}: a link to {outside.resolve()}, outside the tree: not read"
    link.unlink()
    link.symlink_to(root / "storage" / "cache" / "news_by_day" / "ACME" / "2024-03-05.json")  # inside: read
    assert load_tree(root).news_counts == {"ACME": (3, 2)}
