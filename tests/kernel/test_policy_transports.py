"""The policy on each transport, against real servers: execution off over HTTP and MCP by default (the
cycle pauses before EXECUTING and says why; approve is refused naming the setting), a bearer token
enforced (401), and a non-loopback bind refused without a token. Execution *on* when enabled is
asserted by test_parity.py (its servers enable it and every transport fills)."""

from __future__ import annotations

import uuid

import pytest

from graph.kernel.errors import Forbidden, Unauthorized
from graph.transports.client import Client
from tests.kernel import local_http
from tests.kernel.servers import POLICY_VARS, REPO, McpToolError, free_port, mcp_stdio, serve, server_env

pytestmark = pytest.mark.integration
AS_OF = "2012-06-01"


@pytest.fixture(scope="module")
def db_uri(embedded_uri):
    return f"{embedded_uri}/kpolicy_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-policy")


@pytest.fixture(scope="module")
def http_default(db_uri, workdir):
    port = free_port()
    with serve(
        ["serve", "--port", str(port)], server_env(db_uri, workdir / "home"), workdir, f"http://127.0.0.1:{port}/store"
    ):
        yield f"http://127.0.0.1:{port}"


def test_http_by_default_runs_to_validating_pauses_and_refuses_approve(db_uri, http_default):
    with Client.http(http_default) as http:
        out = http.run_cycle(["AAPL", "MSFT"], AS_OF, memory="off")
        assert out.status == "pending_approval"
        assert "EXECUTING" not in out.contracts and out.contracts["VALIDATING"]["passed"] is True
        assert "TRADEGRAPH_ALLOW_EXECUTION=http" in out.execution_disabled
        with pytest.raises(Forbidden, match="TRADEGRAPH_ALLOW_EXECUTION=http"):
            http.approve(out.session_id)
        raw = local_http.post(f"{http_default}/sessions/{out.session_id}/approval", json={"approved": True})
        assert raw.status_code == 403 and raw.json()["error"] == "forbidden"
    # nothing filled: the session's portfolio is untouched, the ledger has no entry for the cycle
    with Client.local(uri=db_uri) as local:
        assert local.read_events(out.session_id, kind="contract").total == 6  # SCANNING..VALIDATING
        # someone allowed to move the book (in-process, or the CLI) approves the very same paused cycle
        done = local.approve(out.session_id, by="test")
        assert done.status == "completed" and done.contracts["EXECUTING"]["status"] in ("filled", "hold")


def test_rejecting_over_http_is_allowed_because_it_moves_nothing(http_default):
    with Client.http(http_default) as http:
        out = http.run_cycle(["IBM"], AS_OF, memory="off")
        assert out.status == "pending_approval"
        rejected = http.approve(out.session_id, approved=False, by="desk")
        assert rejected.status == "rejected" and "EXECUTING" not in rejected.contracts
        decision = http.read_events(out.session_id, kind="approval_decided")
        assert [(e["payload"]["approved"], e["payload"]["by"]) for e in decision.events] == [(False, "desk (via http)")]


def test_mcp_by_default_runs_to_validating_pauses_and_refuses_approve(db_uri, workdir):
    with mcp_stdio(server_env(db_uri, workdir / "home"), workdir) as mcp:
        out = mcp("run_cycle", {"symbols": ["AAPL"], "as_of": AS_OF, "memory": "off"})
        assert out.status == "pending_approval" and "EXECUTING" not in out.contracts
        assert "TRADEGRAPH_ALLOW_EXECUTION=mcp" in out.execution_disabled
        with pytest.raises(McpToolError) as e:
            mcp("approve", {"session_id": out.session_id})
        text = str(e.value)
        assert text.startswith("forbidden: approve refused") and "TRADEGRAPH_ALLOW_EXECUTION=mcp" in text
        assert "\n" not in text
        # the tool says it moves the book
        tools = {t.name: t for t in mcp.list_tools()}
        assert tools["approve"].annotations.destructive_hint is True
        assert tools["read_events"].annotations.destructive_hint is False


def test_a_configured_token_is_required_on_every_http_path(db_uri, workdir):
    port, token = free_port(), "s3cret-" + uuid.uuid4().hex
    env = server_env(db_uri, workdir / "home", TRADEGRAPH_API_TOKEN=token)
    base = f"http://127.0.0.1:{port}"
    with serve(["serve", "--port", str(port)], env, workdir, f"{base}/store", token=token):
        for path in ("/store", "/sessions", "/openapi.json", "/tasks/t-000000000000/events"):
            missing = local_http.get(base + path)
            wrong = local_http.get(base + path, headers={"Authorization": "Bearer nope"})
            assert missing.status_code == wrong.status_code == 401, path
            assert missing.headers["www-authenticate"] == "Bearer"
        assert local_http.post(f"{base}/cycles", json={"symbols": ["AAPL"], "as_of": AS_OF}).status_code == 401
        assert local_http.get(f"{base}/store", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with Client.http(base, token=token) as ok:
            assert ok.store_status().ok
        with Client.http(base) as anonymous, pytest.raises(Unauthorized, match="bearer token"):
            anonymous.store_status()


def test_mcp_streamable_http_requires_the_token_too(db_uri, workdir):
    port, token = free_port(), uuid.uuid4().hex
    env = server_env(db_uri, workdir / "home", TRADEGRAPH_API_TOKEN=token)
    url = f"http://127.0.0.1:{port}/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with serve(["mcp", "--http", str(port)], env, workdir, url, token=token):
        assert local_http.post(url, json=init, headers=hdrs).status_code == 401
        ok = local_http.post(url, json=init, headers={**hdrs, "Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and "tradegraph" in ok.text


@pytest.mark.parametrize("command", [["serve", "--host", "0.0.0.0"], ["mcp", "--http", "0", "--host", "0.0.0.0"]])
@pytest.mark.timeout(60)  # in process: a regression that binds would serve until stopped
def test_a_non_loopback_bind_without_a_token_refuses_to_start(command, db_uri, workdir, monkeypatch, capsys):
    # in process (`main([...])`): the refusal, its exit code and its line are what is checked, not a process start
    from graph.transports.cli.main import main

    for name, value in server_env(db_uri, workdir / "home").items():
        monkeypatch.setenv(name, value)
    for name in POLICY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    code = main([*command, "--port", str(free_port())] if command[0] == "serve" else command)
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "refusing to bind 0.0.0.0" in lines[0] and "TRADEGRAPH_API_TOKEN" in lines[0]


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
def test_a_stopped_server_stops_the_embedded_store_it_started(command, tmp_path):
    """SIGTERM (what a service manager sends) must close the store, not leave its server process behind."""
    import json
    import os
    import signal

    from tests.kernel.servers import server_env

    home = tmp_path / "home"
    env = server_env("unused", home)
    env.pop("MONGODB_URI")  # the embedded store under TRADEGRAPH_HOME, started by the server itself
    port = free_port()
    args = [*command, str(port)] if command[0] == "mcp" else [*command, "--port", str(port)]
    ready = f"http://127.0.0.1:{port}/" + ("mcp" if command[0] == "mcp" else "store")
    with serve(args, env, tmp_path, ready) as proc:
        nx_pid = json.loads((home / "server.json").read_text())["pid"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    with pytest.raises(ProcessLookupError):
        os.kill(nx_pid, 0)
    assert not (home / "server.json").exists()
