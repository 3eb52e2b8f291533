"""The walkthrough of docs/own-data.md in separate processes on the embedded store: a project whose
tradegraph.toml names the fictional ACME prices runs a cycle and a backtest; from another directory, with no
toml and no flag, the session continues and both verify identical; a file changed afterwards is reported by its
hash. The verifies run in this process, from that other directory (what they check is the manifest, not a
process's start)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def tg(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MONGODB_URI", "OPENAI_API_KEY", "TRADEGRAPH_LLM", "TRADEGRAPH_CONFIG")
    }
    env.update({"TRADEGRAPH_HOME": str(cwd / ".tg_home"), "PYTHONPATH": str(ROOT)})
    return subprocess.run(
        [sys.executable, "-m", "graph.transports.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_walkthrough_across_processes(embedded_uri, tmp_path, tradegraph, monkeypatch):
    db = ["--db", f"{embedded_uri}/own_{uuid.uuid4().hex[:8]}"]
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "data").mkdir(parents=True)
    elsewhere.mkdir()
    acme = project / "data" / "acme.csv"
    shutil.copy(ROOT / "docs" / "examples" / "acme.csv", acme)
    (project / "tradegraph.toml").write_text('[data]\nprices = "data/acme.csv"\n')

    check = tg(["data", "check"], project)
    assert check.returncode == 0, check.stderr
    assert "ACME        502 bars 2023-01-03..2024-12-31; us_equity: every bar on a session" in check.stdout
    run = tg(["run", "--symbols", "ACME", "--as-of", "2024-03-01", "--json", *db], project)
    assert run.returncode == 0, run.stderr
    session = json.loads(run.stdout)["session_id"]
    bt = tg(
        [
            "backtest",
            "--symbols",
            "ACME",
            "--start",
            "2024-01-02",
            "--end",
            "2024-03-28",
            "--every",
            "10",
            "--run-id",
            "acme",
            "--json",
            "--out",
            str(project / "experiments"),
            *db,
        ],
        project,
    )
    assert bt.returncode == 0, bt.stderr
    assert json.loads(bt.stdout)["decision_points"] == 7  # 61 sessions, every 10th

    # no toml here, no flag: the session's manifest names the file
    more = tg(["run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", session, "--json", *db], elsewhere)
    assert more.returncode == 0, more.stderr
    assert json.loads(more.stdout)["contracts"]["SCANNING"]["snapshots"][0]["price"] == 82.2
    monkeypatch.chdir(elsewhere)
    home = {"TRADEGRAPH_HOME": str(elsewhere / ".tg_home")}
    for sid, cycles in ((session, 2), ("bt-acme", 7)):
        v = tradegraph("replay", sid, "--verify", *db, **home)
        assert v.returncode == 0, v.stdout + v.stderr
        assert v.stdout.count("IDENTICAL") == cycles and "replay identical to the recording" in v.stdout
        assert "data source" not in v.stdout

    with acme.open("a") as fh:
        fh.write("ACME,2025-01-02,47.1,47.9,46.5,47.5,1000000\n")
    v = tradegraph("replay", session, "--verify", *db, **home)
    assert v.returncode == 0, v.stdout + v.stderr
    assert (
        " ".join(v.stdout.split()).count(
            f"data source market.sha256: content hash differs: {acme.resolve()} changed since the run"
        )
        == 2
    )
