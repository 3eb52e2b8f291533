"""The smaller edges of the command line, each as a user meets it: a port out of range or taken, a URI no store
speaks, an output path that can't be written, a script run with a Python that lacks tradegraph, `--version`.
Each is one line on stderr, no traceback, and the README's exit code: 2 bad input, 3 only for the store.

The CLI runs in process (`main([...])`): what is checked is its answer, not how a process starts; only the script
run by a Python without tradegraph needs a process of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from database.embedded import start_server, stop_server
from tests.helpers import Answer

REPO = Path(__file__).resolve().parents[2]


def one_line(r: Answer | subprocess.CompletedProcess, code: int) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert lines[0].startswith("tradegraph: error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("value", ["99999", "0", "-1", "abc", "65536"])
@pytest.mark.parametrize("command", [["serve", "--port"], ["mcp", "--http"]])
@pytest.mark.timeout(60)  # a regression that starts listening would serve until stopped
def test_a_port_out_of_range_is_refused_before_anything_listens(tradegraph, command, value, tmp_path):
    r = tradegraph(*command[:-1], f"{command[-1]}={value}", TRADEGRAPH_HOME=str(tmp_path / "home"))
    line = one_line(r, 2)
    assert f"{command[-1]} " in line and value in line and "1..65535" in line
    assert not (tmp_path / "home" / "data").exists()  # no store was opened


@pytest.mark.parametrize("command", [["serve", "--port"], ["mcp", "--http"]])
@pytest.mark.timeout(60)
def test_a_busy_port_is_bad_input_naming_it_not_the_store_code(tradegraph, command, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = tradegraph(*command, str(port), TRADEGRAPH_HOME=str(tmp_path / "home"))
    line = one_line(r, 2)
    assert f"{command[-1]} {port}" in line and f"127.0.0.1:{port}" in line and "in use" in line
    assert not (tmp_path / "home" / "data").exists()


@pytest.mark.timeout(60)
def test_a_store_uri_no_store_speaks_is_bad_input_from_the_flag_as_from_the_variable(tradegraph, tmp_path):
    env = {"TRADEGRAPH_HOME": str(tmp_path / "home")}
    flag = one_line(tradegraph("sessions", "--db", "redis://u:secret@cache:6379", **env), 2)
    variable = one_line(tradegraph("sessions", **env, MONGODB_URI="redis://u:secret@cache:6379"), 2)
    for line, named in (
        (flag, "--db 'redis://u:***@cache:6379'"),
        (variable, "MONGODB_URI='redis://u:***@cache:6379'"),
    ):
        assert named in line and "is not a store URI" in line and "secret" not in line
    assert one_line(tradegraph("serve", "--port", "8765", "--db", "redis://x", **env), 2).endswith(
        "--db 'redis://x' is not a store URI: expected mongodb://, mongodb+srv://, mongomock://"
    )


@pytest.fixture
def running_store(tmp_path):
    """The home's embedded store, already running (as after `tradegraph store start`): each call reuses it."""
    home = tmp_path / "home"
    start_server(home)
    yield home
    stop_server(home)


@pytest.mark.integration
def test_an_output_path_that_cant_be_written_is_one_line_and_nothing_runs(tradegraph, running_store, tmp_path):
    env = {"TRADEGRAPH_HOME": str(running_store)}
    made = tradegraph("run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--json", **env)
    assert made.returncode == 0, made.stderr
    session = json.loads(made.stdout)["session_id"]
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    line = one_line(tradegraph("replay", session, "--html", "/nonexistent-h25/x.html", **env), 2)
    assert line == "tradegraph: error: --html /nonexistent-h25/x.html: folder /nonexistent-h25 does not exist"
    assert "is not a folder" in one_line(tradegraph("replay", session, "--html", str(a_file / "x.html"), **env), 2)
    assert "is a folder" in one_line(tradegraph("replay", session, "--html", str(tmp_path), **env), 2)
    window = ["--symbols", "AAPL", "--start", "2012-06-01", "--end", "2012-06-08", "--no-progress"]
    line = one_line(tradegraph("backtest", *window, "--out", str(a_file / "exp"), "--run-id", "edge", **env), 2)
    assert line.startswith(f"tradegraph: error: --out {a_file / 'exp'}: ")
    line = one_line(
        tradegraph(
            "backtest",
            *window,
            "--out",
            str(tmp_path / "exp"),
            "--plot",
            str(a_file / "p.png"),
            "--run-id",
            "edge",
            **env,
        ),
        2,
    )
    assert line.startswith(f"tradegraph: error: --plot {a_file / 'p.png'}: ")
    # refused before any decision point ran: no run folder, no backtest session
    assert not (tmp_path / "exp").exists()
    listed = tradegraph("sessions", "--json", "--all", **env)
    assert [json.loads(x)["session_id"] for x in listed.stdout.splitlines()] == [session]
    # a path only the write itself finds wrong (here /proc, where nothing can be made) is one line and 2 as well
    line = one_line(tradegraph("schemas", "--out", "/proc/tradegraph-h25", **env), 2)
    assert "/proc/tradegraph-h25" in line


def test_a_script_run_with_a_python_without_tradegraph_says_which_python_to_use(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    for script in ("run_cycle.py", "run_backtest.py", "replay_session.py"):
        r = subprocess.run(
            [str(bare / "bin" / "python"), str(REPO / "scripts" / script), "--help"],
            cwd=tmp_path,
            env={"PATH": os.environ.get("PATH", "")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        line = one_line(r, 2)
        assert str(REPO / ".venv" / "bin" / "python") in line and f"scripts/{script} --help" in line, line


def test_version_is_the_installed_packages(tradegraph):
    r = tradegraph("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"tradegraph {version('tradegraph')}", (r.stdout, r.stderr)
