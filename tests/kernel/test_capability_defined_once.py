"""A capability is defined once: its function, its models and its registry entry (route included). A throwaway
capability registered here, and nothing else changed, is an HTTP endpoint with its OpenAPI path (a real server on
loopback), an MCP tool and a client method, in-process and over HTTP; removed, it is gone from all of them."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Optional

import anyio
import pytest
from pydantic import Field

from graph.kernel import CAPABILITIES, Kernel
from graph.kernel import errors as E
from graph.kernel import models as m
from graph.kernel.capabilities import Context, Route, capability
from graph.transports.client import Client
from graph.transports.http import create_app
from graph.transports.mcp import create_server
from tests.kernel import local_http
from tests.kernel.servers import free_port

NAME = "echo_session"


class EchoInput(m.Input):
    session_id: m.SessionId
    word: str = Field(min_length=1, max_length=20, description="said back")
    times: int = Field(1, ge=1, le=5)
    note: Optional[str] = None


class EchoOutput(m.Output):
    session_id: str
    words: list[str]
    transport: str
    note: Optional[str]


@pytest.fixture
def echo() -> Iterator[None]:
    assert NAME not in CAPABILITIES

    @capability(EchoInput, EchoOutput, http=Route.post("/sessions/{session_id}/echo", "test", status=201), keyed=True)
    def echo_session(ctx: Context, inp: EchoInput) -> EchoOutput:
        """Say a word back, times over: a capability that exists only in this test."""
        return EchoOutput(
            session_id=inp.session_id, words=[inp.word] * inp.times, transport=ctx.policy.transport, note=inp.note
        )

    try:
        yield
    finally:
        CAPABILITIES.pop(NAME, None)


@pytest.fixture
def kernel(tmp_path):
    k = Kernel.open(f"mongomock://once_{uuid.uuid4().hex[:10]}", experiments_dir=tmp_path / "experiments", env={})
    yield k
    k.close()


@contextlib.contextmanager
def served(kernel: Kernel) -> Iterator[str]:
    """The HTTP app on a real loopback port, in a thread of this process (so it sees the throwaway capability)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(kernel), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_new_capability_is_on_http_mcp_and_the_client_with_no_other_change(echo, kernel):
    # HTTP: the OpenAPI operation, derived
    spec = create_app(kernel).openapi()
    op = spec["paths"]["/sessions/{session_id}/echo"]["post"]
    assert op["operationId"] == NAME and op["tags"] == ["test"] and "201" in op["responses"]
    assert op["description"] == "Say a word back, times over: a capability that exists only in this test."
    params = {p["name"]: p for p in op["parameters"]}
    assert params["session_id"]["in"] == "path" and params["session_id"]["schema"]["pattern"].startswith("^[A-Za-z0-9")
    assert params["Idempotency-Key"]["in"] == "header"
    body = spec["components"]["schemas"][
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    ]
    assert set(body["properties"]) == {"word", "times", "note"} and body["required"] == ["word"]
    assert op["requestBody"]["required"] is True  # `word` has no default: a POST without a body is bad input
    assert op["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/EchoOutput")

    with served(kernel) as base:
        # HTTP: a call, its status, its bad input and its idempotency key, as every capability has them
        r = local_http.post(f"{base}/sessions/s-1/echo", json={"word": "buy", "times": 2})
        assert r.status_code == 201 and r.json()["words"] == ["buy", "buy"] and r.json()["transport"] == "http"
        bad = local_http.post(f"{base}/sessions/s-1/echo", json={"word": "buy", "times": 9})
        assert bad.status_code == 422 and bad.json()["error"] == "bad_input" and bad.json()["field"] == "times"
        assert local_http.post(f"{base}/sessions/s-1/echo").status_code == 422
        assert local_http.post(f"{base}/sessions/bad id/echo", json={"word": "x"}).status_code == 422
        assert local_http.post(f"{base}/sessions/s-1/echo", json={"word": "x", "extra": 1}).json()["field"] == "extra"


def test_a_new_capability_is_a_client_method_over_http(echo, kernel):
    """A method with the model's signature, the same answer, the key sent as the Idempotency-Key header."""
    with served(kernel) as base, Client.http(base) as c:
        out = c.echo_session("s-2", "hold", times=3, idempotency_key="k-echo-1")
        assert isinstance(out, EchoOutput) and out.words == ["hold"] * 3 and out.transport == "http"
        assert c.echo_session("s-2", "hold", times=3, idempotency_key="k-echo-1") == out
        with pytest.raises(E.BadInput, match="k-echo-1|key"):
            c.echo_session("s-2", "sell", idempotency_key="k-echo-1")
        with pytest.raises(E.BadInput, match="times"):
            c.call(NAME, session_id="s-2", word="x", times=0)
        with pytest.raises(TypeError):
            c.echo_session("s-2")  # `word` is required, as in the model


def test_a_new_capability_is_an_mcp_tool_and_a_local_client_method(echo, kernel):
    server = create_server(kernel)
    tools = {t.name: t for t in anyio.run(server.list_tools)}
    assert NAME in tools and "idempotency_key" in tools[NAME].input_schema["properties"]
    assert set(tools[NAME].input_schema["properties"]) - {"idempotency_key"} == set(EchoInput.model_fields)
    result = anyio.run(server.call_tool, NAME, {"session_id": "s-3", "word": "wait"})
    assert "wait" in str(result) and "mcp" in str(result)

    c = Client.local(kernel=kernel)
    assert NAME in dir(c)
    assert c.echo_session("s-4", "go").model_dump() == {
        "session_id": "s-4",
        "words": ["go"],
        "transport": "local",
        "note": None,
    }


def test_removed_it_is_gone_everywhere(kernel):
    assert NAME not in CAPABILITIES
    assert "/sessions/{session_id}/echo" not in create_app(kernel).openapi()["paths"]
    assert NAME not in {t.name for t in anyio.run(create_server(kernel).list_tools)}
    with pytest.raises(AttributeError, match=NAME):
        getattr(Client.local(kernel=kernel), NAME)


def test_every_capability_is_a_client_method_not_shadowed_by_the_clients_own():
    own = {n for klass in Client.__mro__ for n in vars(klass)}  # what Client defines, not what it derives
    assert {"call", "close", "watch_task"} <= own
    assert not own & set(CAPABILITIES), own & set(CAPABILITIES)
    assert all(getattr(Client, name).__qualname__ == f"Client.{name}" for name in CAPABILITIES)


def test_a_route_that_cannot_be_derived_is_refused_when_registered():
    with pytest.raises(TypeError, match=r"path parameter \{task_id\} must be a required field"):

        @capability(EchoInput, EchoOutput, http=Route.get("/echo/{task_id}", "test"))
        def echo_wrong_param(ctx, inp):  # pragma: no cover - never registered
            ...

    with pytest.raises(TypeError, match="GET /sessions is already list_sessions's route"):

        @capability(m.ListSessionsInput, m.SessionsOutput, http=Route.get("/sessions", "test"))
        def list_sessions_again(ctx, inp):  # pragma: no cover - never registered
            ...

    assert "echo_wrong_param" not in CAPABILITIES and "list_sessions_again" not in CAPABILITIES


def test_every_operation_carries_its_input_models_fields_typed(kernel):
    """Path parameters with the model's constraints, every other field a query parameter or a body property, the
    output model as the response, the Idempotency-Key header exactly on the keyed ones."""
    spec = create_app(kernel).openapi()
    schemas = spec["components"]["schemas"]
    for name, cap in CAPABILITIES.items():
        op = spec["paths"][cap.http.path][cap.http.method.lower()]
        assert op["operationId"] == name and str(cap.http.status) in op["responses"], name
        params = {p["name"]: p for p in op.get("parameters", [])}
        fields = cap.input_model.model_json_schema()["properties"]
        for p in cap.http.path_params:
            assert params[p]["in"] == "path" and params[p]["required"], (name, p)
            got, want = params[p]["schema"], fields[p]
            assert {k: got.get(k) for k in ("type", "pattern", "maxLength")} == {
                k: want.get(k) for k in ("type", "pattern", "maxLength")
            }, (name, p)
        rest = set(fields) - set(cap.http.path_params)
        if cap.http.body and rest:
            ref = op["requestBody"]["content"]["application/json"]["schema"]
            ref = ref.get("$ref") or ref["anyOf"][0]["$ref"]
            assert set(schemas[ref.rsplit("/", 1)[1]]["properties"]) == rest, name
        else:
            assert {p for p, v in params.items() if v["in"] == "query"} == rest, name
        assert ("Idempotency-Key" in params) == cap.keyed, name
        response = op["responses"][str(cap.http.status)]["content"]["application/json"]["schema"]
        assert response["$ref"].rsplit("/", 1)[1] == cap.output_model.__name__, name
