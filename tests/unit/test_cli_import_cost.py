"""The commands a user runs to look (`--version`, `sessions`, `portfolio`) do not load LangChain: it and the agent's
tools cost seconds of imports on every call (issue 29: answer in ≤ 1 s; bench/bench_cli_latency.py measures it).

A fresh interpreter is the point (what a command imports is what a new process pays), so this runs one."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# in one process: a stored book to look at, then each command as `main` runs it, then what was imported
SCRIPT = """
import contextlib, io, json, sys
from database.connection import connect
from schemas.portfolio import PortfolioSnapshot
from graph.transports.cli.main import main

uri, sid = sys.argv[1], sys.argv[2]
store = connect(uri)
store.portfolios.save(sid, PortfolioSnapshot(cash=100000.0, as_of="2012-06-01"), "c-1")
codes = {}
for args in (["sessions", "--db", uri], ["portfolio", sid, "--db", uri], ["--version"]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            codes[args[0]] = main(args)
        except SystemExit as e:  # --version exits through argparse
            codes[args[0]] = e.code
print(json.dumps({"codes": codes, "langchain": sorted(m for m in sys.modules if m.startswith("langchain"))}))
"""


def test_looking_commands_do_not_import_langchain(tmp_path):
    env = {"PYTHONPATH": str(REPO), "TRADEGRAPH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, f"mongomock://imports_{uuid.uuid4().hex[:10]}", "s-look"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["codes"] == {"sessions": 0, "portfolio": 0, "--version": 0}, out["codes"]
    assert out["langchain"] == [], f"imported by sessions/portfolio/--version: {out['langchain'][:5]}"
