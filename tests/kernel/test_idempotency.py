"""Idempotent retries (graph/kernel/idempotent.py) against a real `serve`, MCP over stdio and the Python client:
a storm of identical keyed requests runs one cycle and fills once (counted in the store: cycles allocated,
ledger entries), every caller gets the same status and body; the same key with another request is refused
(422); without a key nothing changed; a first run killed mid-cycle is never run again under its key (409)."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

import httpx
import pytest

from database.connection import connect
from graph.kernel import Kernel
from graph.kernel import errors as E
from graph.transports.client import Client
from tests.kernel import local_http
from tests.kernel.servers import McpToolError, free_port, mcp_stdio, serve, server_env

pytestmark = pytest.mark.integration
SYMBOLS, AS_OF = ["AAPL", "MSFT"], "2012-06-01"
STORM = 8


# the kernel tests' shared server, execution allowed over HTTP (tests/kernel/conftest.py)
@pytest.fixture(scope="module")
def db_uri(executing_server):
    return executing_server.db_uri


@pytest.fixture(scope="module")
def workdir(executing_server):
    return executing_server.workdir


@pytest.fixture(scope="module")
def http_url(executing_server):
    return executing_server.url


def counts(db_uri: str, session_id: str) -> dict:
    """What the store holds for the session: cycles allocated, ledger entries, key uses audited."""
    with connect(db_uri) as store:
        return {
            "cycles": len(store.events.cycle_ids(session_id)),
            "fills": store.executions.col.count_documents({"session_id": session_id}),
            "uses": [e["payload"]["use"] for e in store.events.read(session_id, kind="idempotency")],
        }


def key_record(db_uri: str, scope: str, key: str) -> dict:
    with connect(db_uri) as store:
        return store.db["idempotency_keys"].find_one({"_id": f"{scope} {key}"})


def empty_session(url: str) -> str:
    """A session whose one cycle was rejected: it exists, its book is untouched."""
    r = local_http.post(
        f"{url}/cycles", json={"symbols": SYMBOLS, "as_of": AS_OF, "memory": "off", "approve": True}, timeout=300
    )
    assert r.json().get("status") == "pending_approval", r.text
    session = r.json()["session_id"]
    assert (
        local_http.post(f"{url}/sessions/{session}/approval", json={"approved": False}, timeout=300).status_code == 200
    )
    return session


def storm(n: int, send) -> list[httpx.Response]:
    """n requests released together by one barrier."""
    gate, out = threading.Barrier(n), [None] * n

    def one(i):
        gate.wait()
        out[i] = send()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out


def test_a_retry_storm_with_one_key_runs_one_cycle_and_fills_once(db_uri, http_url):
    session = empty_session(http_url)
    assert counts(db_uri, session) == {"cycles": 1, "fills": 0, "uses": []}
    body, key = {"session_id": session, "symbols": SYMBOLS, "as_of": AS_OF, "memory": "off"}, uuid.uuid4().hex
    answers = storm(
        STORM, lambda: local_http.post(f"{http_url}/cycles", json=body, headers={"Idempotency-Key": key}, timeout=300)
    )
    assert {r.status_code for r in answers} == {200}, [r.text[:200] for r in answers]
    assert len({r.content for r in answers}) == 1  # byte for byte the first answer
    first = answers[0].json()
    assert first["cycle_id"] == f"{session}:c2" and first["contracts"]["EXECUTING"]["status"] == "filled"
    after = counts(db_uri, session)
    assert after["cycles"] == 2 and after["fills"] == 1
    assert sorted(after["uses"]) == ["first"] + ["repeat"] * (STORM - 1)
    record = key_record(db_uri, f"session:{session}", key)
    assert record["state"] == "done" and record["status"] == "ok" and record["cycle_id"] == first["cycle_id"]
    assert record["uses"] == {"first": 1, "repeat": STORM - 1}
    assert record["expires_ts"] - record["created_at"] >= 24 * 3600

    # the same key with another request: refused, nothing run
    other = local_http.post(
        f"{http_url}/cycles", json={**body, "as_of": "2012-06-04"}, headers={"Idempotency-Key": key}, timeout=300
    )
    assert other.status_code == 422, other.text[:300]
    err = other.json()
    assert err["error"] == "bad_input" and err["field"] == "idempotency_key" and "different request" in err["message"]
    assert counts(db_uri, session)["cycles"] == 2

    # a retry long after gets the same answer again
    again = local_http.post(f"{http_url}/cycles", json=body, headers={"Idempotency-Key": key}, timeout=300)
    assert again.status_code == 200 and again.content == answers[0].content

    # no key: each request runs, as before
    for _ in range(2):
        assert local_http.post(f"{http_url}/cycles", json=body, timeout=300).status_code == 200
    assert counts(db_uri, session)["cycles"] == 4


def test_a_malformed_key_is_bad_input(http_url):
    r = local_http.post(
        f"{http_url}/cycles",
        json={"symbols": SYMBOLS, "as_of": AS_OF},
        headers={"Idempotency-Key": "has spaces in it"},
        timeout=60,
    )
    assert r.status_code == 422 and r.json()["field"] == "Idempotency-Key", r.text


def test_retried_approvals_with_one_key_decide_once_and_answer_alike(db_uri, http_url):
    r = local_http.post(
        f"{http_url}/cycles", json={"symbols": SYMBOLS, "as_of": AS_OF, "memory": "off", "approve": True}, timeout=300
    )
    session, key = r.json()["session_id"], uuid.uuid4().hex

    def send() -> httpx.Response:
        return local_http.post(
            f"{http_url}/sessions/{session}/approval",
            json={"approved": True, "by": "erin"},
            headers={"Idempotency-Key": key},
            timeout=300,
        )

    answers = storm(3, send) + [send()]
    assert {r.status_code for r in answers} == {200} and len({r.content for r in answers}) == 1
    with connect(db_uri) as store:
        approvals = store.events.read(session, kind="approval_decided")
    assert len(approvals) == 1 and counts(db_uri, session)["fills"] <= 1
    # a different approver without the key is still refused: the key dedups retries, not decisions
    assert (
        local_http.post(
            f"{http_url}/sessions/{session}/approval", json={"approved": True, "by": "frank"}, timeout=300
        ).status_code
        == 409
    )


@pytest.mark.requires("ray")
def test_keyed_backtests_start_one_task_and_sweeps_repeat_their_answer(http_url, workdir):
    key = uuid.uuid4().hex
    body = {"symbols": ["AAPL"], "start": "2012-03-01", "end": "2012-03-09", "every": 5, "memory": "off"}
    answers = storm(
        4, lambda: local_http.post(f"{http_url}/backtests", json=body, headers={"Idempotency-Key": key}, timeout=300)
    )
    assert {r.status_code for r in answers} == {202} and len({r.content for r in answers}) == 1
    task = answers[0].json()["task_id"]
    tasks = [t for t in local_http.get(f"{http_url}/tasks").json()["tasks"] if t["params"]["start"] == "2012-03-01"]
    assert [t["task_id"] for t in tasks] == [task]
    deadline = time.monotonic() + 240
    while local_http.get(f"{http_url}/tasks/{task}").json()["status"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    # a sweep's answer (here a refusal: ray_address is not taken over HTTP) is repeated with its status and body
    sweep = {
        "universes": [["AAPL"]],
        "windows": {"kind": "list", "spans": [["2012-03-01", "2012-03-09"]]},
        "ray_address": "auto",
    }
    first, second = (
        local_http.post(f"{http_url}/sweeps", json=sweep, headers={"Idempotency-Key": key + "-s"}) for _ in range(2)
    )
    assert first.status_code == second.status_code == 403 and first.content == second.content
    changed = local_http.post(
        f"{http_url}/sweeps", json={**sweep, "workers": 3}, headers={"Idempotency-Key": key + "-s"}
    )
    assert changed.status_code == 422 and changed.json()["field"] == "idempotency_key"


def test_the_python_client_over_http_and_in_process_share_a_sessions_key(db_uri, http_url):
    session, key = empty_session(http_url), uuid.uuid4().hex
    with Client.http(http_url) as http:
        a = http.run_cycle(SYMBOLS, AS_OF, session_id=session, memory="off", idempotency_key=key)
        b = http.run_cycle(SYMBOLS, AS_OF, session_id=session, memory="off", idempotency_key=key)
        with pytest.raises(E.BadInput, match="different request"):
            http.run_cycle(["AAPL"], AS_OF, session_id=session, memory="off", idempotency_key=key)
    with Client.local(uri=db_uri) as local:  # the key is the session's: a retry from another transport repeats
        c = local.run_cycle(SYMBOLS, AS_OF, session_id=session, memory="off", idempotency_key=key)
    assert a == b == c
    assert counts(db_uri, session)["cycles"] == 2 and counts(db_uri, session)["uses"].count("first") == 1


def test_mcp_takes_the_same_key(db_uri, workdir):
    env = server_env(db_uri, workdir / "home", TRADEGRAPH_ALLOW_EXECUTION="mcp")
    key = uuid.uuid4().hex
    with mcp_stdio(env, workdir) as mcp:
        tools = {t.name: t for t in mcp.list_tools()}
        assert "idempotency_key" in tools["run_cycle"].input_schema["properties"]
        assert "idempotency_key" not in tools["read_events"].input_schema["properties"]
        args = {"symbols": SYMBOLS, "as_of": AS_OF, "memory": "off", "idempotency_key": key}
        first, second = mcp("run_cycle", args), mcp("run_cycle", args)
        assert first == second
        with pytest.raises(McpToolError) as e:
            mcp("run_cycle", {**args, "symbols": ["AAPL"]})
        assert str(e.value).startswith("bad_input: Idempotency-Key") and "different request" in str(e.value)
    assert counts(db_uri, first.session_id) == {"cycles": 1, "fills": 1, "uses": ["first", "repeat", "mismatch"]}


def test_a_first_run_killed_mid_cycle_is_never_run_again_under_its_key(db_uri, workdir, http_url):
    """SIGKILL the server while the keyed cycle runs; a retry on a new server is refused (409, cut off), and starts
    no cycle: it may have run in part, which only reading the session can tell."""
    session, key = empty_session(http_url), uuid.uuid4().hex
    body = {"session_id": session, "symbols": ["AAPL", "MSFT", "IBM", "GOOG"], "as_of": AS_OF, "memory": "off"}
    port = free_port()
    env = server_env(db_uri, workdir / "home", TRADEGRAPH_ALLOW_EXECUTION="http")
    with serve(["serve", "--port", str(port)], env, workdir, f"http://127.0.0.1:{port}/store") as proc:
        sent = threading.Thread(
            target=lambda: _swallow(
                lambda: local_http.post(
                    f"http://127.0.0.1:{port}/cycles", json=body, headers={"Idempotency-Key": key}, timeout=300
                )
            )
        )
        sent.start()
        deadline = time.monotonic() + 60
        while key_record(db_uri, f"session:{session}", key) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        sent.join(60)
    record = key_record(db_uri, f"session:{session}", key)
    assert record["state"] == "running"  # killed before it answered
    before = counts(db_uri, session)["cycles"]
    retry = local_http.post(f"{http_url}/cycles", json=body, headers={"Idempotency-Key": key}, timeout=300)
    assert retry.status_code == 409, retry.text[:300]
    assert "cut off before it answered" in retry.json()["message"]
    assert counts(db_uri, session)["cycles"] == before


def test_a_duplicate_still_running_after_the_wait_is_told_to_retry(db_uri):
    k = Kernel.open(db_uri, env={}, idempotency_wait_s=0.0)
    key, args = uuid.uuid4().hex, {"symbols": ["AAPL", "MSFT", "IBM"], "as_of": AS_OF, "memory": "off"}
    try:
        first: dict = {}
        runner = threading.Thread(
            target=lambda: first.setdefault("out", k.call_keyed("run_cycle", args, idempotency_key=key))
        )
        runner.start()
        deadline = time.monotonic() + 60
        while key_record(db_uri, "caller:local:anonymous", key) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(E.Conflict, match="is still running: retry later"):
            k.call_keyed("run_cycle", args, idempotency_key=key)
        runner.join(300)
        assert k.call_keyed("run_cycle", args, idempotency_key=key) == first["out"]
    finally:
        k.close()


def _swallow(fn):
    try:
        fn()
    except httpx.HTTPError:
        pass


def test_key_records_hold_the_fingerprint_status_and_response(db_uri, http_url):
    key = uuid.uuid4().hex
    r = local_http.post(
        f"{http_url}/cycles",
        json={"symbols": ["IBM"], "as_of": AS_OF, "memory": "off"},
        headers={"Idempotency-Key": key},
        timeout=300,
    )
    record = key_record(db_uri, "caller:http:anonymous", key)
    assert len(record["fingerprint"]) == 64 and record["status"] == "ok"
    assert json.loads(record["response"]) == r.json()
