"""The CLI end to end, in separate processes, on the embedded store (the default path); its bad-input answers, an
unreachable store and `features` in process (`main([...])`), where no second process is what is checked."""

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tg(args, home, timeout=120, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "OPENAI_API_KEY", "TRADEGRAPH_LLM")}
    env.update({"TRADEGRAPH_HOME": str(home), "PYTHONPATH": ROOT, **(env_extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "graph.transports.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_run_then_events_from_another_process(tmp_path):
    run = tg(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--json"], tmp_path)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["status"] in ("completed", "rejected") and out["events"] > 50
    assert set(out["contracts"]) >= {"SCANNING", "PLANNING", "ANALYZING", "DEBATE", "DECIDING", "VALIDATING"}
    ev = tg(["events", out["session_id"]], tmp_path)
    assert ev.returncode == 0, ev.stderr
    lines = [json.loads(line) for line in ev.stdout.splitlines()]
    assert len(lines) == out["events"] and [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    only = tg(["events", out["session_id"], "--kind", "transition"], tmp_path)
    assert {json.loads(line)["kind"] for line in only.stdout.splitlines()} == {"transition"}


def test_script_entry_point_matches_the_cli(tmp_path):
    r = subprocess.run(
        [sys.executable, "scripts/run_cycle.py", "--symbols", "IBM", "--as-of", "2011-03-01", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRADEGRAPH_HOME": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["contracts"]["SCANNING"]["universe"] == ["IBM"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "--symbols", "AAPL,NOPE", "--as-of", "2012-06-01"], "NOPE"),
        (["run", "--symbols", "AAPL", "--as-of", "2012-02-30"], "2012-02-30"),
        (["run", "--symbols", "AAPL", "--as-of", "2020-01-02"], "2020-01-02"),
        (["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--session", "s-missing"], "s-missing"),
        (["events", "s-missing"], "s-missing"),
        (["features", "XYZ", "--as-of", "2012-06-01"], "XYZ"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_value(running_home, monkeypatch, capsys, args, needle):
    from graph.transports.cli.main import main

    monkeypatch.setenv("TRADEGRAPH_HOME", str(running_home))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


@pytest.fixture(scope="module")
def running_home(tmp_path_factory):
    """A home whose embedded store is already running (as after `tradegraph store start`), shared by the module's
    in-process calls: none of them starts or stops a server of its own."""
    from database.embedded import start_server, stop_server

    home = tmp_path_factory.mktemp("running_home")
    start_server(home)
    yield home
    stop_server(home)


def in_process(args, home, monkeypatch, capsys) -> subprocess.CompletedProcess:
    """`main([...])` in this process with TRADEGRAPH_HOME = home and no MONGODB_URI: its exit code and output."""
    from graph.transports.cli.main import main

    with monkeypatch.context() as mp:
        mp.setenv("TRADEGRAPH_HOME", str(home))
        mp.delenv("MONGODB_URI", raising=False)
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def test_unreachable_db_fails_clearly_instead_of_hanging(tmp_path, monkeypatch, capsys):
    t = time.monotonic()
    r = in_process(
        ["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--db", "mongodb://127.0.0.1:1/x"],
        tmp_path,
        monkeypatch,
        capsys,
    )
    # not a speed test: the 5 s connect timeout applies, not pymongo's 30 s default (loose on a loaded machine)
    assert time.monotonic() - t < 28
    assert r.returncode == 3 and "mongodb://127.0.0.1:1/x" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_features_command(tmp_path, monkeypatch, capsys):
    r = in_process(["features", "AAPL", "--as-of", "2012-06-01", "--json"], tmp_path, monkeypatch, capsys)
    assert r.returncode == 0
    b = json.loads(r.stdout)
    assert b["symbol"] == "AAPL" and b["technical"]["rsi14"] is not None
    table = in_process(["features", "AAPL", "--as-of", "2012-06-01"], tmp_path, monkeypatch, capsys)
    assert "rsi14" in table.stdout and str(b["technical"]["rsi14"]) in table.stdout
