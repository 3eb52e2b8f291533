"""The commands a user runs to look (`--version`, `sessions`, `portfolio`) load neither pandas nor LangGraph nor
LangChain, nor build the contracts only the agents ask for, and `sessions` (summaries only) builds no event model:
those cost seconds of imports on every call (issue 29: answer in ≤ 1 s; bench/bench_cli_latency.py measures it). `portfolio` values a book that holds positions, so the valuation path runs.

A fresh interpreter is the point (what a command imports is what a new process pays), so the commands run in one:
the store a real offline cycle wrote here is copied into it, collection by collection."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from bson import json_util

from graph.kernel.core import Kernel

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "langgraph", "langchain", "langchain_core")
# the contracts only the agents' passes ask for: building them (and their JSON Schemas, for the output caps) is what
# every command's start-up check used to pay (agent/output_caps.py DEFAULT_CAPS)
AGENT_CONTRACTS = ("schemas.analysis", "schemas.debate", "schemas.decision", "schemas.plan", "schemas.states")

# in one process: the copied store, then each command as `main` runs it, then what was imported
SCRIPT = """
import contextlib, io, json, sys
from bson import json_util
from database.connection import connect
from graph.transports.cli.main import main

uri, sid, dump = sys.argv[1], sys.argv[2], sys.argv[3]
store = connect(uri)
for name, docs in json_util.loads(open(dump).read()).items():
    if docs:
        store.db[name].insert_many(docs)
codes, printed = {}, {}
for args in (["sessions", "--db", uri], ["portfolio", sid, "--db", uri], ["--version"]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            codes[args[0]] = main(args)
        except SystemExit as e:  # --version exits through argparse
            codes[args[0]] = e.code
    printed[args[0]] = out.getvalue()
    if args[0] == "sessions":  # it reads summaries: no event is parsed, so no event model need be built
        event_models = "schemas.events" in sys.modules
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[4].split(","))
contracts = sorted(m for m in sys.modules if m in sys.argv[5].split(","))
print(json.dumps({"codes": codes, "printed": printed, "heavy": heavy, "contracts": contracts,
                  "event_models": event_models}))
"""


def test_looking_commands_load_neither_pandas_nor_langgraph_nor_langchain_nor_the_agents_contracts(tmp_path):
    kernel = Kernel.open(f"mongomock://imports_{uuid.uuid4().hex[:10]}")
    try:
        out: Any = kernel.call("run_cycle", {"symbols": ["AAPL", "MSFT"], "as_of": "2012-06-01"}, transport="cli")
        assert out.status == "completed", out.error
        assert kernel.store.portfolios.load(out.session_id).positions, "no position: nothing to value"
        db = kernel.store.db
        dump = tmp_path / "store.json"
        dump.write_text(json_util.dumps({name: list(db[name].find()) for name in db.list_collection_names()}))
    finally:
        kernel.close()
    env = {"PYTHONPATH": str(REPO), "TRADEGRAPH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            f"mongomock://imports_{uuid.uuid4().hex[:10]}",
            out.session_id,
            str(dump),
            ",".join(HEAVY),
            ",".join(AGENT_CONTRACTS),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["codes"] == {"sessions": 0, "portfolio": 0, "--version": 0}, seen["codes"]
    assert out.session_id in seen["printed"]["sessions"]
    assert "AAPL" in seen["printed"]["portfolio"] and "MSFT" in seen["printed"]["portfolio"]
    assert seen["heavy"] == [], f"imported by sessions/portfolio/--version: {seen['heavy'][:8]}"
    assert seen["contracts"] == [], f"the agents' contracts built by sessions/portfolio/--version: {seen['contracts']}"
    assert seen["event_models"] is False, "sessions built the event models (schemas.events)"
