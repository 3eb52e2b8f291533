"""The servers' edges: `serve` stops when told to, even while a request waits on a store that is gone; the MCP
server's stderr carries nothing below a warning (a library's DEBUG line included) unless TRADEGRAPH_DEBUG."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from database.embedded import pid_alive
from tests.kernel import local_http

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# a request on a hung store waits for its socket timeout (30 s, database/connection.py) and, unbounded, the stop
# with it; bounded, the stop takes the shutdown grace (1 s) and the process's exit. Far apart: not a timing race
HUNG_REQUEST_S = 30


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_stops_while_a_request_waits_on_a_hung_store_and_stops_the_store_it_started(tmp_path):
    home, port = tmp_path / "home", _free_port()
    env = {**os.environ, "TRADEGRAPH_HOME": str(home), "PYTHONPATH": str(REPO), "TRADEGRAPH_LLM": "offline"}
    env.pop("MONGODB_URI", None)  # its own embedded store, started (and owned) by the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "graph.transports.cli", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    nx_pid = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if local_http.get(f"{url}/sessions", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail(f"serve did not answer: {proc.stderr.read() if proc.poll() is not None else ''}")
        nx_pid = json.loads((home / "server.json").read_text())["pid"]
        os.kill(nx_pid, signal.SIGSTOP)  # the store hangs: a request now waits on its socket
        waiting = threading.Thread(
            target=lambda: _quietly(lambda: local_http.get(f"{url}/sessions", timeout=60)), daemon=True
        )
        waiting.start()
        time.sleep(1.0)
        assert waiting.is_alive(), "the request did not wait on the hung store: nothing to stop through"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(HUNG_REQUEST_S / 2)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve still running {HUNG_REQUEST_S / 2:.0f} s after SIGTERM: it waits on the hung request")
        print(f"serve stopped {time.monotonic() - started:.2f} s after SIGTERM (exit {code})")
        assert code == 128 + signal.SIGTERM
        # the store it started is stopped too, hung or not, and not left behind
        deadline = time.monotonic() + 10
        while pid_alive(nx_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(nx_pid) and not (home / "server.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if nx_pid is not None and pid_alive(nx_pid):
            os.kill(nx_pid, signal.SIGKILL)


def _quietly(fn) -> None:
    try:
        fn()
    except httpx.HTTPError:
        pass


def test_the_mcp_server_writes_no_debug_line_to_stderr(tmp_path):
    """Two cycles of one session over stdio: the second recalls the first's notes, building a memory index, and
    bm25s logs that at DEBUG through the handler the MCP SDK puts on the root logger (seen before the fix:
    `DEBUG    Building index from IDs objects`)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {
        **os.environ,
        "TRADEGRAPH_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO),
        "TRADEGRAPH_ALLOW_EXECUTION": "mcp",
        "TRADEGRAPH_LLM": "offline",
    }
    env.pop("MONGODB_URI", None)
    errlog = tmp_path / "stderr.txt"

    async def session() -> tuple[dict, dict]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "graph.transports.cli", "mcp"], env=env, cwd=str(tmp_path)
        )
        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    await s.list_tools()
                    one = await s.call_tool("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-03-01"})
                    two = await s.call_tool(
                        "run_cycle",
                        {
                            "symbols": ["AAPL"],
                            "as_of": "2012-03-07",
                            "session_id": one.structured_content["session_id"],
                        },
                    )
                    await s.call_tool("read_events", {"session_id": "s-unknown"})  # an error, too
                    return one.structured_content, two.structured_content

    one, two = asyncio.run(session())
    assert one["status"] == two["status"] == "completed"
    assert any(n["hits"] for n in two["notes"]), "the second cycle recalled nothing: no index was built"
    assert errlog.read_text() == ""
