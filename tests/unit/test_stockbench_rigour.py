"""The scorecard's rigour (issue 31): every row's metrics recompute from the NAV it ships, a paired test of daily
excess returns against buy-and-hold, the downturn and upturn sub-periods, runs' spread, and the training cut-off
flag."""

from __future__ import annotations

import json
import re

import pytest

from graph.services.benchmark.stockbench import rigour, scorecard
from graph.services.benchmark.stockbench.protocol import Protocol

DATES = ["2025-03-03", "2025-03-04", "2025-04-30", "2025-05-01", "2025-05-02", "2025-06-30"]


def nav(values):
    return [{"date": d, "equity": v} for d, v in zip(DATES, values)]


def test_the_baseline_row_recomputes_from_its_nav_on_the_shipped_window():
    """The shipped StockBench data's 20 symbols over the paper's window: the row's figures are its NAV's (the issue's
    independent recomputation found +0.408% stated against +0.378% in the NAV)."""
    from agent.data.sources import load_file, stockbench_files
    from graph.services.benchmark.stockbench.run import days_of, opens

    proto = Protocol()
    files = stockbench_files(None)
    market = load_file("prices", files.prices)
    dates = days_of(market, proto)
    row = scorecard.baseline_row(dates, opens(market, proto.symbols, dates), proto)
    again = rigour.recomputed(row, proto.initial_cash)
    assert row["cumulative_return"] == pytest.approx(again["cumulative_return"], abs=1e-6)
    assert round(row["cumulative_return"] * 100, 3) == 0.378 and round(row["gross_cumulative_return"] * 100, 3) == 0.408
    assert row["max_drawdown"] == pytest.approx(again["max_drawdown"], abs=1e-6)


def test_the_paired_test_finds_a_real_edge_and_not_a_null_one():
    import pandas as pd

    dates = [d.strftime("%Y-%m-%d") for d in pd.bdate_range("2025-03-03", periods=30)]
    shape = [100.0, 101.0, 99.0, 100.0, 102.0, 101.0] * 5
    bh = [{"date": d, "equity": v} for d, v in zip(dates, shape)]
    same = rigour.paired_test(bh, bh, 100.0)
    assert same["mean"] == 0 and same["p_value"] == 1.0 and same["ci95"] == [0.0, 0.0]
    better = [{"date": d, "equity": v * (1.01**i)} for i, (d, v) in enumerate(zip(dates, shape))]
    edge = rigour.paired_test(better, bh, 100.0)
    assert edge["mean"] > 0 and edge["ci95"][0] > 0 and edge["p_value"] < 0.05
    assert rigour.paired_test(better, bh, 100.0) == edge  # seeded: the same NAVs, the same figures


def test_too_few_sessions_get_no_interval_and_no_p_value():
    """Two sessions a run beat the buy-and-hold on both resample to a p of 0: no test is given, and it says why."""
    bh = nav([100.0, 99.0])
    better = nav([101.0, 101.5])
    short = rigour.paired_test(better, bh, 100.0)
    assert short["sessions"] == 2 and short["mean"] > 0 and short["ci95"] is None and short["p_value"] is None
    assert short["method"] == "no test: 2 paired session(s), fewer than the 20 a bootstrap needs here"


def test_sub_periods_start_from_the_equity_each_began_with():
    parts = rigour.sub_periods(nav([100.0, 90.0, 80.0, 88.0, 96.0, 100.0]), 100.0)
    down, up = parts["downturn (Mar-Apr)"], parts["upturn (May-Jun)"]
    assert (down["start"], down["end"], down["sessions"]) == ("2025-03-03", "2025-04-30", 3)
    assert down["cumulative_return"] == pytest.approx(-0.2) and down["max_drawdown"] == pytest.approx(-0.2)
    assert up["cumulative_return"] == pytest.approx(100.0 / 80.0 - 1)
    assert rigour.sub_periods(nav([100.0])[:1], 100.0)["upturn (May-Jun)"] is None


def test_spread_over_runs():
    out = rigour.spread(
        [
            {"cumulative_return": 0.01, "max_drawdown": -0.1, "sortino": 0.02},
            {"cumulative_return": 0.03, "max_drawdown": -0.2, "sortino": 0.04},
        ]
    )
    assert out["runs"] == 2 and out["cumulative_return"] == pytest.approx(0.02)
    assert out["cumulative_return_std"] == pytest.approx(0.0141421, rel=1e-4)
    assert rigour.spread([{"cumulative_return": 0.01, "max_drawdown": -0.1, "sortino": 0.0}])["sortino_std"] is None


@pytest.mark.parametrize(
    "models,seen",
    [
        (["openai:gpt-4o-mini", "openai:gpt-4o"], False),
        (["anthropic:claude-sonnet-4-0"], True),
        (["offline-quick", "offline-deep"], False),
        (["smollm2-135m-instruct"], None),
    ],
)
def test_the_cutoff_flag(models, seen):
    out = rigour.may_have_seen(models, "2025-03-03")
    assert out["may_have_seen_window"] is seen


def test_every_cutoff_names_its_source_or_says_unverified():
    """A maker's page (a URL, with what it states), tradegraph's own document for its offline model, or a source
    that begins 'unverified': never a bare date."""
    table = json.loads(rigour.CUTOFFS.read_text())["models"]
    assert table
    for name, row in table.items():
        assert set(row) == {"cutoff", "source"}, name
        source = row["source"]
        assert isinstance(source, str) and (
            re.match(r"https://\S+ \(.+\)$", source)
            or source.startswith(
                (rigour.UNVERIFIED + ": ", "tradegraph's rule-based offline model (agent/offline_model.py)")
            )
        ), name
        assert row["cutoff"] is None or re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])", row["cutoff"]), name
        assert (row["cutoff"] is None) == name.startswith("offline-"), name  # only the offline model read nothing
        assert rigour.cutoff_of(name)["verified"] is not source.startswith(rigour.UNVERIFIED)
    assert rigour.cutoff_of("openai:gpt-oss-120b")["verified"] is False  # said, not pretended


def test_the_default_runs_follow_what_answers(monkeypatch):
    """The offline model: 1 run, sent no temperature. A provider's model (an OpenAI-compatible endpoint configured;
    nothing is sent here): 3 runs at the protocol's 0.7, or 1 when the user chose temperature 0."""
    from graph.services.benchmark.stockbench.run import BenchmarkError, resolve_models, runs_of

    offline = resolve_models([(None, None)])
    assert runs_of(offline, None) == 1 and offline[0].temperature is None and not offline[0].sampling
    with pytest.raises(BenchmarkError, match="^temperature 0.2: the offline model takes none"):
        resolve_models([(None, None)], temperature=0.2, chosen=True)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    real = resolve_models([("openai:local-model", None)])
    assert runs_of(real, None) == 3 and real[0].temperature == 0.7 and real[0].sampling
    assert runs_of(real, 2) == 2
    assert runs_of(resolve_models([("openai:local-model", None)], temperature=0.0, chosen=True), None) == 1


def test_the_offline_default_is_one_run_and_the_table_says_n_1(tmp_path, capsys):
    import io
    import uuid

    from rich.console import Console

    from graph.transports.cli.benchmark import render
    from graph.transports.cli.main import main

    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-04",
        "--json",
        "--db",
        f"mongomock://one_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path),
        "--benchmark-id",
        "once",
    ]
    assert main(args) == 0, capsys.readouterr().err
    card = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in card["rows"]].count("run") == 1 and "run_mean" not in [r["kind"] for r in card["rows"]]
    assert not any("temperature" in line for line in card["departures"])
    out = io.StringIO()
    render(Console(file=out, width=250), card, tmp_path)
    text = out.getvalue()
    assert "runs: n=1 per configuration, no standard deviation (the offline model is deterministic" in text
    assert " ± " not in text, text
    assert "vs buy-and-hold: no test: 2 paired session(s), fewer than the 20" in text
    # a temperature for the offline model is bad input, one line, exit 2, nothing run
    assert main(args[:-1] + ["twice", "--temperature", "0.7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "temperature 0.7: the offline model takes none" in err
    assert not (tmp_path / "twice").exists()


def test_runs_n_gives_each_runs_row_and_their_mean_and_spread(tmp_path, capsys):
    import uuid

    from graph.transports.cli.main import main

    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-05",
        "--runs",
        "2",
        "--json",
        "--db",
        f"mongomock://runs_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path),
        "--benchmark-id",
        "twice",
    ]
    assert main(args) == 0, capsys.readouterr().err
    card = json.loads(capsys.readouterr().out)
    runs = [r for r in card["rows"] if r["kind"] == "run"]
    (mean,) = [r for r in card["rows"] if r["kind"] == "run_mean"]
    assert [r["name"] for r in runs] == [
        "tradegraph (offline-quick/offline-deep) run 1",
        "tradegraph (offline-quick/offline-deep) run 2",
    ]
    assert len({r["session_ids"][0] for r in runs}) == 2, "each run a session of its own"
    assert mean["runs"] == 2 and mean["cumulative_return"] == pytest.approx(
        sum(r["cumulative_return"] for r in runs) / 2
    )
    assert mean["cumulative_return_std"] == pytest.approx(0.0, abs=1e-12)  # the offline model: the same run twice
    for r in runs:  # every row recomputes from its NAV, and carries its test, sub-periods and cut-off flag
        again = rigour.recomputed(r, 100_000.0)
        assert r["cumulative_return"] == pytest.approx(again["cumulative_return"], abs=1e-6)
        assert r["vs_buy_and_hold"]["sessions"] == 3 and r["may_have_seen_window"] is False
        assert r["sub_periods"]["downturn (Mar-Apr)"]["sessions"] == 3
        assert r["sub_periods"]["upturn (May-Jun)"] is None
    base = next(r for r in card["rows"] if r["kind"] == "baseline")
    assert base["cumulative_return"] == pytest.approx(rigour.recomputed(base, 100_000.0)["cumulative_return"], abs=1e-6)


@pytest.mark.slow  # 4 runs of the offline model: 8-20 s
def test_each_configurations_mean_row_follows_its_own_runs(tmp_path, capsys):
    import uuid

    from graph.transports.cli.main import main

    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-03",
        "--model",
        "offline:offline-quick/offline:offline-deep",
        "--model",
        "offline:offline-deep/offline:offline-quick",
        "--runs",
        "2",
        "--json",
        "--db",
        f"mongomock://pairs_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path),
        "--benchmark-id",
        "pairs",
    ]
    assert main(args) == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)["rows"]
    ours = [(r["kind"], r["name"]) for r in rows if r["kind"] in ("run", "run_mean")]
    a, b = (
        "tradegraph (offline:offline-quick/offline:offline-deep)",
        "tradegraph (offline:offline-deep/offline:offline-quick)",
    )
    assert ours == [
        ("run", f"{a} run 1"),
        ("run", f"{a} run 2"),
        ("run_mean", f"{a} (mean of 2)"),
        ("run", f"{b} run 1"),
        ("run", f"{b} run 2"),
        ("run_mean", f"{b} (mean of 2)"),
    ]
