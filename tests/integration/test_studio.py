"""`langgraph dev` serves the graph from langgraph.json, and a run through the official SDK client is
audited into the store like a CLI cycle (graph/transports/studio.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from database.connection import connect
from database.embedded import stop_server
from graph.machine.state import CONTRACT_KEYS
from graph.services.replay.session import load_session_log

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH = Path(sys.executable).parent / "langgraph"
STATES = list(CONTRACT_KEYS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log: Path, n: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _wait_ok(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with code {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/ok", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"langgraph dev did not answer {url}/ok within {timeout_s:.0f}s:\n{_tail(log)}")


@pytest.fixture
def dev_server(tmp_path):
    if not LANGGRAPH.exists():
        pytest.skip(f"no langgraph CLI at {LANGGRAPH}: install the studio extra (pip install -e '.[studio]')")
    home = tmp_path / "tg_home"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    env.update(
        TRADEGRAPH_HOME=str(home), TRADEGRAPH_LLM="offline", LANGSMITH_TRACING="false", LANGCHAIN_TRACING_V2="false"
    )
    env.pop("OPENAI_API_KEY", None)
    log = tmp_path / "langgraph-dev.log"
    # --no-reload: other work in the repo must not restart the server mid-test
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ok(url, proc, log)
        yield url, home, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # the embedded store the server started under this test's home (no-op if already stopped)
        stop_server(home)


def test_studio_run_is_audited(dev_server, monkeypatch):
    from langgraph_sdk import get_sync_client

    url, home, log = dev_server
    client = get_sync_client(url=url)
    assistants = client.assistants.search(graph_id="tradegraph")
    assert assistants, f"graph 'tradegraph' not served:\n{_tail(log)}"
    thread = client.threads.create()
    thread_id = thread["thread_id"]

    final = client.runs.wait(thread_id, "tradegraph", input={"symbols": ["AAPL"], "as_of": "2012-06-01"})
    assert isinstance(final, dict), f"run failed: {final!r}\n{_tail(log)}"
    assert final.get("status") in ("completed", "rejected"), f"{final.get('status')}: {final.get('error')}"
    for state, key in CONTRACT_KEYS.items():
        assert final.get(key) is not None, f"no {state} contract in the final state"
    session_id = f"studio-{thread_id}"
    assert final["session_id"] == session_id and final["cycle_id"].startswith(session_id + ":")

    # a second run on the same thread is the session's next cycle, not a repeat of the first
    second = client.runs.wait(thread_id, "tradegraph", input={"symbols": ["AAPL"], "as_of": "2012-06-04"})
    assert isinstance(second, dict) and second.get("status") in ("completed", "rejected"), second
    assert second["cycle_id"] != final["cycle_id"]

    # the same store: connect() finds the embedded server the dev server started (server.json)
    monkeypatch.setenv("TRADEGRAPH_HOME", str(home))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    store = connect()
    try:
        events = store.events.read(session_id)
        assert events, f"no events stored for {session_id}:\n{_tail(log)}"
        first = [e for e in events if e["cycle_id"] == final["cycle_id"]]
        entered = [e["payload"]["to"] for e in first if e["kind"] == "transition" and e["payload"]["to"] != "END"]
        assert entered == STATES, entered
        assert [e["payload"] for e in first if e["kind"] == "transition"][-1]["to"] == "END"
        assert {e["kind"] for e in first} >= {"transition", "contract", "llm_request", "llm_response", "tool_call"}
        session = load_session_log(store, session_id)
        assert session.gap_free and not session.warnings()
        assert [c.cycle_id for c in session.cycles] == [final["cycle_id"], second["cycle_id"]]
        assert [c.status for c in session.cycles] == [final["status"], second["status"]]
        # the second cycle started from the session's stored portfolio, as `tradegraph run --session` does
        after_first = final["execution"]["portfolio_after"]
        assert second["scan"]["portfolio"]["cash"] == pytest.approx(after_first["cash"])
        assert set(second["scan"]["portfolio"]["positions"]) == set(after_first["positions"])
    finally:
        store.close()
