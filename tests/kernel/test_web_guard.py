"""DNS rebinding and cross-origin requests against real servers (issue 28, hole 3): `tradegraph serve` and
`mcp --http` answer 421 to a Host that is not theirs, refuse a state-changing request from another origin (403),
and an approval needs its decision stated in the body; the Python client and MCP clients (no Origin) still work."""

from __future__ import annotations

import uuid

import pytest

from graph.kernel.policy import HostPolicy, PolicyError, allowed_host_names
from graph.transports.client import Client
from graph.transports.web_guard import is_own_origin, refusal
from tests.kernel import local_http
from tests.kernel.servers import free_port, serve, server_env

AS_OF = "2012-06-01"


@pytest.fixture(scope="module")
def api(embedded_uri, tmp_path_factory):
    """`tradegraph serve` that may execute over HTTP: an approval that gets through fills."""
    workdir = tmp_path_factory.mktemp("web-guard")
    port = free_port()
    env = server_env(
        f"{embedded_uri}/guard_{uuid.uuid4().hex[:8]}", workdir / "home", TRADEGRAPH_ALLOW_EXECUTION="http"
    )
    with serve(["serve", "--port", str(port)], env, workdir, f"http://127.0.0.1:{port}/store"):
        yield f"http://127.0.0.1:{port}", port


def _paused(base: str) -> str:
    with Client.http(base) as c:
        out = c.run_cycle(["AAPL"], AS_OF, memory="off", approve=True)
    assert out.status == "pending_approval"
    return out.session_id


@pytest.mark.integration
def test_a_rebound_host_is_misdirected(api):
    base, port = api
    for host in (f"evil.example:{port}", "evil.example", f"localhost.evil.example:{port}"):
        r = local_http.get(f"{base}/sessions", headers={"Host": host})
        assert r.status_code == 421, host
        body = r.json()
        assert body["field"] == "Host" and host in body["message"] and "\n" not in body["message"]
    # the server's own names still answer
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert local_http.get(f"{base}/sessions", headers={"Host": host}).status_code == 200, host


@pytest.mark.integration
def test_a_cross_origin_approval_is_refused_and_fills_nothing(api):
    base, port = api
    sid = _paused(base)
    url = f"{base}/sessions/{sid}/approval"
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": f"http://localhost:{port + 1}"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        r = local_http.post(url, json={"approved": True}, headers=headers)
        assert r.status_code == 403, headers
        assert r.json()["error"] == "forbidden" and "cross-origin POST refused" in r.json()["message"]
    # a body-less POST from its own origin states no decision: bad input, not an approval
    own = {"Origin": f"http://127.0.0.1:{port}"}
    r = local_http.post(url, headers=own)
    assert r.status_code == 422 and r.json()["field"] == "body"
    r = local_http.post(url, json={}, headers=own)
    assert r.status_code == 422 and r.json()["field"] == "approved"
    with Client.http(base) as c:
        assert c.read_events(sid, kind="contract").total == 6  # SCANNING..VALIDATING: nothing executed
    # the same approval from the server's own origin goes through
    r = local_http.post(url, json={"approved": True, "by": "desk"}, headers=own)
    assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    assert "EXECUTING" in r.json()["contracts"]


@pytest.mark.integration
def test_the_python_client_sends_no_origin_and_still_approves(api):
    base, _ = api
    sid = _paused(base)
    with Client.http(base) as c:
        assert c.approve(sid).status == "completed"


@pytest.mark.integration
def test_mcp_over_http_has_the_same_guard(embedded_uri, tmp_path):
    port = free_port()
    env = server_env(f"{embedded_uri}/guardmcp_{uuid.uuid4().hex[:8]}", tmp_path / "home")
    url = f"http://127.0.0.1:{port}/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with serve(["mcp", "--http", str(port)], env, tmp_path, url):
        assert local_http.post(url, json=init, headers={**hdrs, "Host": f"evil.example:{port}"}).status_code == 421
        assert local_http.post(url, json=init, headers={**hdrs, "Origin": "http://evil.example"}).status_code == 403
        ok = local_http.post(url, json=init, headers=hdrs)
        assert ok.status_code == 200 and "tradegraph" in ok.text


def test_the_rules():
    hosts = HostPolicy.for_bind("127.0.0.1", {"TRADEGRAPH_ALLOWED_HOSTS": "desk.lan, Box.Example."})
    assert hosts.names == {"localhost", "desk.lan", "box.example"}
    for ok in ("127.0.0.1:8000", "[::1]:8000", "localhost", "desk.lan:80", "10.1.2.3", "localhost.:8000"):
        assert refusal("GET", {"host": ok}, hosts) is None, ok
    for bad in ("", "evil.example", "127.0.0.1.evil.example:8000", "[::1"):
        assert refusal("GET", {"host": bad}, hosts)[0] == 421, bad
    assert HostPolicy.for_bind("myhost.lan", {}).allows("myhost.lan:8000")
    assert is_own_origin("http://localhost:8000", "localhost:8000")
    assert is_own_origin("http://localhost", "localhost:80")
    assert is_own_origin("https://desk.lan", "desk.lan:443", "https")
    for other in (
        "http://localhost:8001",
        "http://evil.example:8000",
        "null",
        "file://",
        "http://localhost:8000/x",
        "http://localhost:99999",
    ):
        assert not is_own_origin(other, "localhost:8000"), other
    h = {"host": "localhost:8000"}
    assert refusal("GET", {**h, "origin": "http://evil.example"}, hosts) is None  # a read: the answer is not theirs
    assert refusal("DELETE", {**h, "origin": "http://evil.example"}, hosts)[0] == 403
    assert refusal("PATCH", {**h, "sec-fetch-site": "same-site"}, hosts)[0] == 403
    assert refusal("POST", {**h, "sec-fetch-site": "same-origin"}, hosts) is None
    with pytest.raises(PolicyError, match="'http://x' is not a host name"):
        allowed_host_names({"TRADEGRAPH_ALLOWED_HOSTS": "a.lan,http://x"})
