"""Real servers for the transport tests: `tradegraph serve` (uvicorn) and the MCP server over stdio or
streamable HTTP, each a subprocess on loopback with its own environment, and a sync MCP caller."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import httpx

from tests.kernel import local_http

REPO = Path(__file__).resolve().parents[2]
POLICY_VARS = ("TRADEGRAPH_ALLOW_EXECUTION", "TRADEGRAPH_API_TOKEN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(uri: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
    env.update({"MONGODB_URI": uri, "TRADEGRAPH_HOME": str(home), "PYTHONPATH": str(REPO), "TRADEGRAPH_LLM": "offline"})
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


@contextlib.contextmanager
def serve(
    args: list[str],
    env: dict[str, str],
    cwd: Path,
    ready_url: str,
    token: Optional[str] = None,
    timeout_s: float = 90.0,
) -> Iterator[subprocess.Popen]:
    """Start `python -m graph.transports.serve_cli ARGS`; yield once ready_url answers (any status < 500)."""
    log = open(cwd / f"server-{time.monotonic_ns()}.log", "w+b")
    proc = subprocess.Popen(
        [sys.executable, "-m", "graph.transports.serve_cli", *args],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"server exited {proc.returncode}: {log.read().decode(errors='replace')[-2000:]}")
            try:
                if local_http.get(ready_url, headers=headers, timeout=2).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready at {ready_url} after {timeout_s}s")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


class McpCaller:
    """The official MCP client over stdio, driven synchronously through an anyio blocking portal."""

    def __init__(self, portal, client):
        self.portal, self.client = portal, client

    def raw(self, name: str, args: dict[str, Any]):
        return self.portal.call(self.client.call_tool, name, args)

    def __call__(self, name: str, args: dict[str, Any]):
        from graph.kernel.capabilities import CAPABILITIES

        r = self.raw(name, args)
        if r.is_error:
            raise McpToolError(r.content[0].text)
        return CAPABILITIES[name].output_model.model_validate(r.structured_content)

    def list_tools(self):
        return self.portal.call(self.client.list_tools).tools


class McpToolError(Exception):
    pass


@contextlib.contextmanager
def mcp_stdio(env: dict[str, str], cwd: Path) -> Iterator[McpCaller]:
    """`python -m graph.transports.mcp` spawned by the official client (its stderr goes to ours)."""
    from anyio.from_thread import start_blocking_portal
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "graph.transports.mcp"], cwd=str(cwd), env=env)
    with start_blocking_portal() as portal:
        client = Client(params, read_timeout_seconds=300)
        with portal.wrap_async_context_manager(client):
            yield McpCaller(portal, client)
