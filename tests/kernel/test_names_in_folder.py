"""Ids that become folders (a backtest's run id, a sweep's id, an artifact's name) stay inside their folder on
every transport: `.`, `..`, empty, a path or an absolute path is refused (CLI exit 2, HTTP 422, an MCP
`bad_input:` error) with one line naming the value, and nothing is written outside experiments/. The kernel
checks the resolved folder again before a task starts, so a stored task document with such an id is refused
too."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from graph.kernel import Kernel
from graph.kernel import errors as E
from tests.kernel import local_http
from tests.kernel.servers import McpToolError, free_port, mcp_stdio, serve, server_env

BAD = ["..", ".", "", "a/../..", "../escape", "/tmp/tradegraph-absolute"]
BACKTEST = {"symbols": ["AAPL"], "start": "2012-03-01", "end": "2012-03-30", "every": 5}
SWEEP = {"universes": [["AAPL"]], "windows": {"kind": "list", "spans": [["2012-03-01", "2012-03-30"]]}}


def tree(root: Path) -> dict[str, float]:
    """Every file under root with its mtime (a server's own log and store home left out)."""
    out = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "home"]
        for f in files:
            p = Path(dirpath) / f
            if not f.startswith("server-"):
                out[str(p.relative_to(root))] = p.stat().st_mtime
    return out


@pytest.fixture
def workdir(tmp_path):
    """A working directory one level below a sentinel folder: `..` from experiments/ is workdir, `../..` is its
    parent; both are watched."""
    work = tmp_path / "work"
    (work / "experiments").mkdir(parents=True)
    return work


def one_line_naming(text: str, value: str) -> bool:
    lines = text.strip().splitlines()
    return len(lines) == 1 and repr(value) in lines[0]


# ------------------------------------------------------------------------------------------------ CLI
@pytest.mark.parametrize("value", BAD)
def test_cli_refuses_each_id_and_writes_nothing(workdir, value, monkeypatch, capsys):
    # in process (`main([...])`): what is checked is the answer and the folder, not how a process starts; the
    # working directory is the workdir, as the relative `--out experiments` needs
    from graph.transports.cli.main import main

    monkeypatch.chdir(workdir)
    monkeypatch.setenv("TRADEGRAPH_HOME", str(workdir / "home"))
    before = tree(workdir.parent)
    db = f"mongomock://names_{uuid.uuid4().hex[:8]}"
    cmds = [
        [
            "backtest",
            "--symbols",
            "AAPL",
            "--start",
            "2012-03-01",
            "--end",
            "2012-03-30",
            "--every",
            "5",
            "--run-id",
            value,
        ],
        ["sweep", "--symbols", "AAPL", "--windows", "2012-03-01..2012-03-30", "--sweep-id", value],
        ["sweep", "--resume", value],
    ]
    for cmd in cmds:
        capsys.readouterr()
        code = main([*cmd, "--out", "experiments", "--db", db])
        err = capsys.readouterr().err
        assert code == 2, (cmd, err)
        assert one_line_naming(err, value) and cmd[-2] in err, (cmd, err)
    assert tree(workdir.parent) == before


# ------------------------------------------------------------------------------------------------ HTTP
@pytest.mark.integration
def test_http_refuses_each_id_with_422_and_writes_nothing(embedded_uri, workdir):
    port = free_port()
    env = server_env(f"{embedded_uri}/knames_{uuid.uuid4().hex[:8]}", workdir / "home")
    base = f"http://127.0.0.1:{port}"
    with serve(["serve", "--port", str(port)], env, workdir, f"{base}/store"):
        before = tree(workdir.parent)
        for value in BAD:
            for path, body, field in (
                ("/backtests", {**BACKTEST, "run_id": value}, "run_id"),
                ("/sweeps", {**SWEEP, "sweep_id": value}, "sweep_id"),
            ):
                r = local_http.post(base + path, json=body, timeout=60)
                assert r.status_code == 422, (path, value, r.text)
                err = r.json()
                assert err["error"] == "bad_input" and err["field"] == field, err
                assert one_line_naming(err["message"], value), err
        # an artifact's name: `..` percent-encoded so the client sends it as it is
        for raw in ("%2E%2E", "%2E"):
            r = local_http.get(f"{base}/tasks/t-000000000000/artifacts/{raw}")
            assert r.status_code == 422 and r.json()["field"] == "name", r.text
        time.sleep(0.5)  # a task started by mistake would have written by now
        assert tree(workdir.parent) == before
        assert local_http.get(f"{base}/tasks").json()["tasks"] == []  # and no task exists


# ------------------------------------------------------------------------------------------------ MCP
@pytest.mark.integration
def test_mcp_refuses_each_id_and_writes_nothing(embedded_uri, workdir):
    env = server_env(f"{embedded_uri}/knames_{uuid.uuid4().hex[:8]}", workdir / "home")
    with mcp_stdio(env, workdir) as mcp:
        before = tree(workdir.parent)
        for value in BAD:
            for tool, args in (
                ("start_backtest", {**BACKTEST, "run_id": value}),
                ("start_sweep", {**SWEEP, "sweep_id": value}),
            ):
                with pytest.raises(McpToolError) as e:
                    mcp(tool, args)
                text = str(e.value)
                assert text.startswith("bad_input: ") and one_line_naming(text, value), text
        assert mcp("list_tasks", {}).tasks == []
        assert tree(workdir.parent) == before


# ------------------------------------------------------------------------------------------------ the kernel's own check
@pytest.fixture
def kernel(workdir):
    k = Kernel.open(f"mongomock://names_{uuid.uuid4().hex[:10]}", experiments_dir=workdir / "experiments", env={})
    yield k
    k.close()


def test_a_stored_task_with_an_escaping_id_is_neither_resumed_nor_read(kernel, workdir):
    """A task document from before ids were checked (or edited in the store): the kernel refuses to run it outside
    experiments/ or to list files outside it."""
    (workdir / "config.json").write_text("{}")  # what a `..` run would resume from
    now = time.time()
    kernel.tasks.col.insert_one(
        {
            "_id": "t-0123456789ab",
            "kind": "backtest",
            "status": "failed",
            "params": {**BACKTEST, "run_id": "x"},
            "run_id": "..",
            "run_dir": str(workdir / "experiments" / ".."),
            "owner": {},
            "created_at": now,
            "updated_at": now,
            "heartbeat_at": now,
            "cancel_requested": False,
            "progress": {},
            "error": "failed: x",
        }
    )
    before = tree(workdir.parent)
    with pytest.raises(E.BadInput, match=r"run_id '\.\.': must be a name inside its folder"):
        kernel.call("resume_task", {"task_id": "t-0123456789ab"}, transport="http")
    with pytest.raises(E.BadInput, match=r"run_dir '\.\.'"):
        kernel.call("task_artifacts", {"task_id": "t-0123456789ab"}, transport="http")
    assert kernel.tasks.col.find_one({"_id": "t-0123456789ab"})["status"] == "failed"  # not claimed
    assert tree(workdir.parent) == before


def test_a_run_folder_that_resolves_elsewhere_is_refused_before_the_task_starts(kernel, workdir, tmp_path):
    """A name the model accepts can still resolve outside: a symlink in experiments/ to another folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workdir / "experiments" / "linked").symlink_to(elsewhere)
    with pytest.raises(E.BadInput, match=r"run_id 'linked': resolves to .*elsewhere, outside"):
        kernel.call("start_backtest", {**BACKTEST, "run_id": "linked"}, transport="http")
    with pytest.raises(E.BadInput, match=r"sweep_id 'linked': resolves to"):
        kernel.call("start_sweep", {**SWEEP, "sweep_id": "linked"}, transport="http")
    assert list(elsewhere.iterdir()) == [] and kernel.tasks.list() == []
