"""Runs live under the home (issue 29): a backtest's folder is <home>/experiments/<id> (or $TRADEGRAPH_RUNS_DIR),
so the same id is found from any working directory; an id found only in the old ./experiments default is named in a
note, never silently used or shadowed."""

from __future__ import annotations

import json
import uuid

import pytest

from graph.kernel.runs import runs_dir
from graph.transports.cli.main import main

WINDOW = [
    "--symbols",
    "AAPL",
    "--start",
    "2012-03-01",
    "--end",
    "2012-03-20",
    "--every",
    "5",
    "--memory",
    "off",
    "--no-progress",
    "--json",
]


@pytest.fixture
def places(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TRADEGRAPH_HOME", str(home))
    monkeypatch.delenv("TRADEGRAPH_RUNS_DIR", raising=False)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return home, a, b, f"mongomock://runs_{uuid.uuid4().hex[:8]}"


def _backtest(args, capsys) -> dict:
    assert main(["backtest", *WINDOW, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_run_started_in_one_folder_resumes_from_another(places, monkeypatch, capsys):
    home, a, b, db = places
    monkeypatch.chdir(a)
    first = _backtest(["--run-id", "r1", "--db", db], capsys)
    assert first["run_dir"] == f"{home / 'experiments'}/r1" and runs_dir() == home / "experiments"
    log = (home / "experiments" / "r1" / "episode_log.jsonl").read_text()
    monkeypatch.chdir(b)
    again = _backtest(["--run-id", "r1", "--db", db], capsys)
    assert again["decision_points"] == first["decision_points"]
    assert (home / "experiments" / "r1" / "episode_log.jsonl").read_text() == log  # resumed: nothing decided again
    assert not (a / "experiments").exists() and not (b / "experiments").exists()


def test_the_runs_folder_can_be_configured(places, monkeypatch, capsys, tmp_path):
    home, a, _, db = places
    monkeypatch.setenv("TRADEGRAPH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(a)
    assert _backtest(["--run-id", "r2", "--db", db], capsys)["run_dir"] == f"{tmp_path / 'runs'}/r2"
    monkeypatch.setenv("TRADEGRAPH_RUNS_DIR", "")
    assert main(["backtest", *WINDOW, "--run-id", "r3", "--db", db]) == 2
    assert "TRADEGRAPH_RUNS_DIR='' is empty" in capsys.readouterr().err


def test_an_id_only_in_the_old_default_is_named(places, monkeypatch, capsys):
    home, a, _, db = places
    (a / "experiments" / "old1").mkdir(parents=True)
    monkeypatch.chdir(a)
    assert main(["backtest", *WINDOW, "--run-id", "old1", "--db", db]) == 0  # runs in the runs folder, and says so
    err = capsys.readouterr().err
    assert f"note: {a / 'experiments' / 'old1'} exists" in err and "--out experiments" in err
    assert (home / "experiments" / "old1" / "config.json").exists()
