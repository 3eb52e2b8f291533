"""A reader that closes the pipe early (`tradegraph run … | head -1`, `events … | head -1`) changes neither the
exit code nor prints a traceback (issue 29): the status's code stands. The pipe's read end is closed before the
command writes anything, so every write meets the closed pipe (deterministic, unlike a race with head)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.kernel.servers import REPO


def _into_closed_pipe(args: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        return subprocess.run(
            [sys.executable, "-m", "graph.transports.cli.main", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            timeout=300,
        )
    finally:
        os.close(write_end)


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "PYTHONPATH": str(REPO), "TRADEGRAPH_HOME": str(tmp_path / "home")}


def test_run_into_a_closed_pipe_exits_with_its_cycles_code(env, tmp_path):
    db = f"mongomock://pipe_{uuid.uuid4().hex[:8]}"
    r = _into_closed_pipe(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--db", db], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr and "Exception ignored" not in r.stderr
    # a cycle that fails still says so: exit 2 for bad input stands as well
    r = _into_closed_pipe(["run", "--symbols", "AAPL", "--as-of", "2012-06-02", "--db", db], env, tmp_path)
    assert r.returncode == 2 and "not a trading day" in r.stderr and "BrokenPipe" not in r.stderr


@pytest.mark.integration
def test_events_into_a_closed_pipe_exit_0_without_a_traceback(env, tmp_path, embedded_uri, capsys):
    from graph.transports.cli.main import main

    db = f"{embedded_uri}/pipe_{uuid.uuid4().hex[:8]}"
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--json", "--db", db]) == 0
    sid = json.loads(capsys.readouterr().out)["session_id"]
    for args in (["events", sid], ["portfolio", sid], ["sessions"]):
        r = _into_closed_pipe([*args, "--db", db], env, tmp_path)
        assert r.returncode == 0 and r.stderr == "", (args, r.stderr)
