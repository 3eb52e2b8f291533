"""One scenario — run a cycle, read its events, replay it, verify it — through the in-process client, a
real uvicorn server (HTTP client) and the MCP server over stdio (official client): equal contracts. And a
session started over MCP is the same session for the Python client and over HTTP."""

from __future__ import annotations

import json
import uuid

import pytest

from graph.transports.client import Client
from tests.kernel.servers import free_port, mcp_stdio, serve, server_env

pytestmark = pytest.mark.integration

SYMBOLS, AS_OF = ["AAPL", "MSFT"], "2012-06-01"


@pytest.fixture(scope="module")
def db_uri(embedded_uri):
    return f"{embedded_uri}/kparity_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-parity")


@pytest.fixture(scope="module")
def http_url(db_uri, workdir):
    port = free_port()
    env = server_env(db_uri, workdir / "home", TRADEGRAPH_ALLOW_EXECUTION="http,mcp")
    with serve(["serve", "--port", str(port)], env, workdir, f"http://127.0.0.1:{port}/store"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def mcp(db_uri, workdir):
    with mcp_stdio(server_env(db_uri, workdir / "home", TRADEGRAPH_ALLOW_EXECUTION="http,mcp"), workdir) as caller:
        yield caller


def scenario(call):
    out = call("run_cycle", {"symbols": SYMBOLS, "as_of": AS_OF, "memory": "off"})
    events = call("read_events", {"session_id": out.session_id, "limit": 100_000})
    replay = call("replay", {"session_id": out.session_id})
    verify = call("verify", {"session_id": out.session_id})
    return out, events, replay, verify


def via_client(client: Client):
    return lambda name, args: getattr(client, name)(**args)


def anonymous(obj, session_id: str):
    """Ids differ per session by construction; everything else must not."""
    return json.loads(json.dumps(obj, default=str).replace(session_id, "<session>"))


def test_the_same_scenario_gives_equal_contracts_on_every_transport(db_uri, http_url, mcp):
    with Client.local(uri=db_uri) as local, Client.http(http_url) as http:
        runs = {"python": scenario(via_client(local)), "http": scenario(via_client(http)), "mcp": scenario(mcp)}
    sessions = {name: run[0].session_id for name, run in runs.items()}
    assert len(set(sessions.values())) == 3  # three sessions, so equality below is not one session read thrice

    for name, (out, events, replay, verify) in runs.items():
        # execution was enabled for http and mcp on these servers, so every transport filled
        assert out.status == "completed", (name, out.status, out.error)
        assert out.execution_disabled is None
        assert set(out.contracts) == {
            "SCANNING",
            "PLANNING",
            "ANALYZING",
            "DEBATE",
            "DECIDING",
            "VALIDATING",
            "EXECUTING",
            "MEMORIZING",
        }
        assert events.total == out.events == replay.events > 100
        assert [e["seq"] for e in events.events] == list(range(1, events.total + 1))
        assert replay.chain["ok"] and replay.gap_free and replay.cycles[0]["status"] == "completed"
        assert verify.ok and verify.identical, (name, verify.first_divergence)
        assert verify.replay_session_id == f"replay-{out.session_id}-1"

    base_out, base_events, base_replay, _ = runs["python"]
    base = anonymous(base_out.contracts, base_out.session_id)
    for name in ("http", "mcp"):
        out, events, replay, _ = runs[name]
        assert anonymous(out.contracts, out.session_id) == base, name
        # the same states and kinds in the same order: the audit trail does not depend on the transport
        assert [(e["state"], e["kind"]) for e in events.events] == [
            (e["state"], e["kind"]) for e in base_events.events
        ], name
        recorded = {s: c["data"] for s, c in replay.cycles[0]["contracts"].items()}
        assert anonymous(recorded, out.session_id) == anonymous(
            {s: c["data"] for s, c in base_replay.cycles[0]["contracts"].items()}, base_out.session_id
        )


def test_a_cycle_started_over_mcp_is_the_same_session_for_python_and_http(db_uri, http_url, mcp):
    out = mcp("run_cycle", {"symbols": ["IBM"], "as_of": AS_OF, "memory": "off"})
    with Client.local(uri=db_uri) as local, Client.http(http_url) as http:
        from_python = local.read_events(out.session_id)
        from_http = http.read_events(out.session_id)
        assert from_python.total == from_http.total == out.events
        assert [e["event_id"] for e in from_python.events] == [e["event_id"] for e in from_http.events]
        assert out.session_id in [s.session_id for s in http.list_sessions(limit=100).sessions]
        replayed = http.replay(out.session_id)
        assert replayed.cycles[0]["cycle_id"] == out.cycle_id
        assert replayed.cycles[0]["contracts"]["EXECUTING"]["data"] == out.contracts["EXECUTING"]
    # and back: a session started over HTTP is readable over MCP
    with Client.http(http_url) as http:
        h = http.run_cycle(["GOOG"], AS_OF, memory="off")
    seen = mcp("read_events", {"session_id": h.session_id, "kind": "contract"})
    assert seen.total == len(h.contracts) == 8


def test_a_backtest_task_over_http_reports_progress_over_sse_and_serves_its_artifacts(http_url, mcp):
    with Client.http(http_url) as http:
        task = http.start_backtest(["AAPL", "MSFT"], "2012-03-01", "2012-03-30", every=5, run_id="kparity-bt")
        assert task.status in ("queued", "running") and task.progress.total == 5
        seen = list(http.watch_task(task.task_id))
        assert seen[-1].status == "succeeded", seen[-1].error
        assert [v.progress.done for v in seen] == sorted(v.progress.done for v in seen)  # never goes backwards
        assert seen[-1].progress.done == 5 and seen[-1].progress.eta_s == 0.0
        arts = http.task_artifacts(task.task_id)
        names = {a.name for a in arts.artifacts}
        assert {"config.json", "episode_log.jsonl", "trade_history.json", "result.json", "equity.png"} <= names
        assert arts.metrics["decision_points"] == 5 and "total_return" in arts.metrics["metrics"]
        png = http._b.http.get(f"/tasks/{task.task_id}/artifacts/equity.png")
        assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    # the task is stored: the MCP server, another process, sees the same task
    assert mcp("task_status", {"task_id": task.task_id}).status == "succeeded"


@pytest.mark.requires("ray")
def test_a_sweep_started_over_http_runs_on_the_servers_ray_and_is_seen_over_mcp(http_url, mcp):
    windows = {"kind": "list", "spans": [["2012-03-01", "2012-03-16"], ["2012-03-19", "2012-03-30"]]}
    with Client.http(http_url) as http:
        task = http.start_sweep([["AAPL"]], windows, every=5, workers=2, sweep_id="kparity-sw")
        assert task.kind == "sweep" and task.progress.unit == "episodes" and task.progress.total == 2
        seen = list(http.watch_task(task.task_id))
        assert seen[-1].status == "succeeded", seen[-1].error
        assert [v.progress.done for v in seen] == sorted(v.progress.done for v in seen)
        arts = http.task_artifacts(task.task_id)
        assert {"grid.json", "results.csv", "aggregate.json", "sweep.png"} <= {a.name for a in arts.artifacts}
        (agg,) = arts.metrics["aggregate"]
        assert agg["succeeded"] == 2 and agg["failed_cycles"] == 0
    assert mcp("task_status", {"task_id": task.task_id}).summary["by_status"] == {"succeeded": 2}
