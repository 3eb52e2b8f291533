"""Ctrl-C on a foreground `tradegraph backtest`: the kernel task it runs is cancelled after the current
decision point (status `cancelled`, never left `running`), the log holds a clean prefix, and the same command
with the same --run-id resumes it to the end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from graph.kernel.core import Kernel

pytestmark = pytest.mark.integration


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_sigint_cancels_the_task_and_the_run_resumes(embedded_uri, tmp_path):
    db = f"{embedded_uri}/bt_sigint_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "exp"
    argv = [sys.executable, "-m", "graph.kernel.transports.cli", "backtest", "--symbols", "AAPL,MSFT",
            "--start", "2011-01-03", "--end", "2011-06-30", "--run-id", "sig", "--json", "--db", db,
            "--out", str(out)]
    env = {**os.environ, "TRADEGRAPH_LLM": "offline"}
    # a shell starting a background job (CI under `cmd &`) leaves SIGINT ignored, and a child keeps that, so
    # Python would never raise KeyboardInterrupt: the terminal's default is restored for the child
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = out / "sig" / "episode_log.jsonl"
    deadline = time.monotonic() + 300  # a cold first process on a loaded machine
    while len(_lines(log)) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before it could be interrupted: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "resumes with --run-id sig" in err

    done = _lines(log)
    assert len(done) >= 3 and [d["decision_point_idx"] for d in done] == list(range(len(done)))
    k = Kernel.open(db)
    try:
        (task,) = k.call("list_tasks", {}).tasks
        assert task.status == "cancelled" and task.resumable and task.progress.done == len(done)
    finally:
        k.close()

    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    total = json.loads(again.stdout)["decision_points"]
    logs = _lines(log)
    assert len(done) < total, "the interrupt stopped the run before its end"
    assert len(logs) == total and [d["decision_point_idx"] for d in logs] == list(range(total))
    assert logs[: len(done)] == done, "the resumed run kept the interrupted run's points as they were"
