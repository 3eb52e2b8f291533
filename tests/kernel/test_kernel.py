"""The kernel in-process (mongomock): the one error mapping, the policy's rules, every capability's
round trip and error, and the definitions the transports derive from (client signatures, routes, MCP
schemas) staying in step with the models."""

from __future__ import annotations

import inspect
import uuid

import pytest
from pydantic import BaseModel, Field, ValidationError

from graph.kernel import CAPABILITIES, Kernel
from graph.kernel import errors as E
from graph.kernel.policy import Policy, PolicyError, check_bind, is_loopback
from graph.transports.client import Client


@pytest.fixture
def kernel(tmp_path):
    k = Kernel.open(f"mongomock://k_{uuid.uuid4().hex[:10]}", experiments_dir=tmp_path / "experiments", env={})
    yield k
    k.close()


# ------------------------------------------------------------------------------------------------ errors
def _validation_error() -> ValidationError:
    class M(BaseModel):
        limit: int = Field(ge=1)

    try:
        M(limit=0)
    except ValidationError as e:
        return e
    raise AssertionError("no error")


def _cases():
    from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

    from agent.data.market import DataError
    from database.errors import AuditSpooled, StoreUnavailable
    from database.portfolio import PortfolioConflict
    from graph.machine.runner import ApprovalConflict, InputError, NothingPending, SessionNotFound
    from graph.services.backtest.loop import BacktestError
    from graph.services.replay.session import SchemaVersionMismatch

    return [
        (SessionNotFound("unknown session 'x'"), E.NotFound),
        (NothingPending("session 'x' has no cycle waiting for approval"), E.Conflict),
        (ApprovalConflict("approval of cycle x:c1 refused"), E.Conflict),
        (PortfolioConflict("portfolio moved on"), E.Conflict),
        (SchemaVersionMismatch("recorded with schema_version [0]"), E.Conflict),
        (InputError("duplicate symbol in 'A,A'"), E.BadInput),
        (DataError("unknown symbol 'ZZZ'"), E.BadInput),
        (BacktestError("start date 1990-01-01 is outside the data for AAPL"), E.BadInput),
        (BacktestError("run id 'r' already exists with a different config (experiments/r/config.json)"), E.Conflict),
        (_validation_error(), E.BadInput),
        (StoreUnavailable("MongoDB at mongodb://h unavailable"), E.StoreUnavailable),
        (AuditSpooled("store stopped taking events", spool_path=None, spooled=3), E.StoreUnavailable),
        (
            ServerSelectionTimeoutError("127.0.0.1:1: [Errno 111] Connection refused, Timeout: 5s, Topology…"),
            E.StoreUnavailable,
        ),
        (OperationFailure("not authorized"), E.Failed),
        (RuntimeError("boom\nsecond line\nthird"), E.Failed),
    ]


@pytest.mark.parametrize("exc,kind", _cases(), ids=lambda v: type(v).__name__)
def test_every_exception_of_today_maps_onto_one_kernel_error_with_one_line(exc, kind):
    err = E.translate(exc)
    assert type(err) is kind
    assert "\n" not in err.message and err.message


def test_the_mapping_table_gives_the_cli_codes_and_http_statuses_of_the_issue():
    rows = {
        cls.kind: (E.exit_code(cls("x")), E.http_status(cls("x")))
        for cls in (E.BadInput, E.NotFound, E.Conflict, E.StoreUnavailable, E.Failed, E.Forbidden, E.Unauthorized)
    }
    assert rows == {
        "bad_input": (2, 422),
        "not_found": (2, 404),
        "conflict": (2, 409),
        "store_unavailable": (3, 503),
        "failed": (1, 500),
        "forbidden": (2, 403),
        "unauthorized": (2, 401),
    }


def test_a_validation_error_names_the_field_and_the_value():
    err = E.translate(_validation_error())
    assert err.field == "limit" and "limit:" in err.message and "(got 0)" in err.message


# ------------------------------------------------------------------------------------------------ policy
def test_execution_is_off_over_http_and_mcp_unless_the_setting_lists_them():
    assert Policy.for_transport("local", {}).allow_execution
    assert Policy.for_transport("cli", {}).allow_execution
    assert not Policy.for_transport("http", {}).allow_execution
    assert not Policy.for_transport("mcp", {}).allow_execution
    env = {"TRADEGRAPH_ALLOW_EXECUTION": "mcp"}
    assert Policy.for_transport("mcp", env).allow_execution and not Policy.for_transport("http", env).allow_execution
    both = {"TRADEGRAPH_ALLOW_EXECUTION": " HTTP , mcp "}
    assert Policy.for_transport("http", both).allow_execution and Policy.for_transport("mcp", both).allow_execution
    with pytest.raises(PolicyError, match="unknown transport"):
        Policy.for_transport("http", {"TRADEGRAPH_ALLOW_EXECUTION": "web"})


@pytest.mark.parametrize(
    "host,loop",
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_loopback(host, loop):
    assert is_loopback(host) is loop


def test_binding_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", Policy.for_transport("http", {}))
    with pytest.raises(PolicyError, match="TRADEGRAPH_API_TOKEN"):
        check_bind("0.0.0.0", Policy.for_transport("http", {}))
    check_bind("0.0.0.0", Policy.for_transport("http", {"TRADEGRAPH_API_TOKEN": "t"}))


def test_a_token_is_compared_whole():
    p = Policy.for_transport("http", {"TRADEGRAPH_API_TOKEN": "abc"})
    assert p.authorized("Bearer abc") and p.authorized("bearer abc")
    assert not any(p.authorized(h) for h in (None, "", "Bearer ab", "Bearer abcd", "Basic abc", "abc"))
    assert Policy.for_transport("http", {}).authorized(None)  # no token configured: open (loopback only)


# ------------------------------------------------------------------------------------------------ capabilities
def test_a_cycle_in_process_executes_and_over_http_policy_pauses_before_executing(kernel):
    local = kernel.call("run_cycle", {"symbols": ["aapl"], "as_of": "2012-06-01", "memory": "off"})
    assert local.status == "completed" and "EXECUTING" in local.contracts and local.execution_disabled is None
    http = kernel.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01", "memory": "off"}, transport="http")
    assert http.status == "pending_approval" and "EXECUTING" not in http.contracts
    assert "TRADEGRAPH_ALLOW_EXECUTION=http" in http.execution_disabled and http.session_id in http.execution_disabled
    with pytest.raises(E.Forbidden):
        kernel.call("approve", {"session_id": http.session_id}, transport="http")
    assert kernel.call("approve", {"session_id": http.session_id}).status == "completed"
    with pytest.raises(E.Conflict, match="no cycle waiting"):  # decided already: nothing pending
        kernel.call("approve", {"session_id": http.session_id})


@pytest.mark.parametrize(
    "name,args,kind,needle",
    [
        ("run_cycle", {"symbols": ["ZZZ"], "as_of": "2012-06-01"}, E.BadInput, "unknown symbol 'ZZZ'"),
        ("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-02"}, E.BadInput, "2012-06-02"),
        ("run_cycle", {"symbols": ["AAPL"], "as_of": "1999-13-45"}, E.BadInput, "1999-13-45"),
        ("run_cycle", {"symbols": ["AAPL", "aapl"], "as_of": "2012-06-01"}, E.BadInput, "duplicate symbol"),
        ("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01", "session_id": "s-none"}, E.NotFound, "s-none"),
        ("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01", "approve": "maybe"}, E.BadInput, "approve"),
        ("run_cycle", {"symbols": ["AAPL"], "asof": "2012-06-01"}, E.BadInput, "as"),
        ("approve", {"session_id": "s-none"}, E.NotFound, "s-none"),
        ("read_events", {"session_id": "s-none"}, E.NotFound, "s-none"),
        ("read_events", {"session_id": "s-x", "limit": 0}, E.BadInput, "limit"),
        ("read_events", {"session_id": "s-x", "kind": "gossip"}, E.BadInput, "gossip"),
        ("replay", {"session_id": "s-none"}, E.NotFound, "s-none"),
        ("verify", {"session_id": "s-none"}, E.NotFound, "s-none"),
        ("features", {"symbol": "ZZZ", "as_of": "2012-06-01"}, E.BadInput, "ZZZ"),
        ("features", {"symbol": "AAPL", "as_of": "2012-06-01", "market": "mars"}, E.BadInput, "market"),
        ("contract_schemas", {"name": "Nope"}, E.NotFound, "Nope"),
        ("task_status", {"task_id": "t-000000000000"}, E.NotFound, "t-000000000000"),
        ("task_status", {"task_id": "../etc"}, E.BadInput, "task_id"),
        ("start_backtest", {"symbols": ["AAPL"], "start": "2012-03-30", "end": "2012-03-01"}, E.BadInput, "after"),
        ("start_backtest", {"symbols": ["ZZZ"], "start": "2012-03-01", "end": "2012-03-30"}, E.BadInput, "ZZZ"),
        ("start_backtest", {"symbols": ["AAPL"], "start": "1980-01-02", "end": "1980-03-30"}, E.BadInput, "outside"),
        ("nonexistent", {}, E.NotFound, "unknown capability"),
    ],
)
def test_bad_calls_fail_with_their_kind_and_a_line_naming_the_value(kernel, name, args, kind, needle):
    with pytest.raises(kind) as e:
        kernel.call(name, args)
    assert type(e.value) is kind and needle in e.value.message and "\n" not in e.value.message


def test_reads_schemas_features_and_store(kernel):
    out = kernel.call("run_cycle", {"symbols": ["MSFT"], "as_of": "2012-06-01", "memory": "off"})
    page = kernel.call("read_events", {"session_id": out.session_id, "limit": 5, "offset": 2})
    assert page.total == out.events and [e["seq"] for e in page.events] == [3, 4, 5, 6, 7]
    contracts = kernel.call("read_events", {"session_id": out.session_id, "kind": "contract", "cycle_id": out.cycle_id})
    assert contracts.total == 8 and {e["kind"] for e in contracts.events} == {"contract"}
    assert kernel.call("list_sessions", {"limit": 5}).sessions[0].session_id == out.session_id
    bundle = kernel.call("features", {"symbol": "msft", "as_of": "2012-06-01"})
    assert bundle.symbol == "MSFT" and bundle.as_of == "2012-06-01"
    assert bundle.model_dump() == out.contracts["SCANNING"]["snapshots"][0]["bundle"]
    from schemas import ALL_CONTRACTS

    assert set(kernel.call("contract_schemas").schemas) == set(ALL_CONTRACTS)
    st = kernel.call("store_status")
    assert st.backend == "mongomock" and st.ok


# ------------------------------------------------------------------------------------------------ definitions
def test_every_client_method_has_the_capabilitys_fields_and_defaults():
    for name, cap in CAPABILITIES.items():
        sig = inspect.signature(getattr(Client, name))
        params = {p: v for p, v in sig.parameters.items() if p != "self"}
        # a capability that starts something takes an idempotency key beside its input (graph/kernel/idempotent.py)
        if cap.keyed:
            assert params.pop("idempotency_key").default is None, name
        assert set(params) == set(cap.input_model.model_fields), name
        for p, v in params.items():
            field = cap.input_model.model_fields[p]
            if field.is_required():
                assert v.default is inspect.Parameter.empty, (name, p)
            else:
                assert v.default == field.default, (name, p)


def test_every_capability_has_an_http_route_in_the_openapi_schema(kernel):
    from graph.transports.http import create_app
    from graph.transports.routes import routes

    spec = create_app(kernel).openapi()
    for name, route in routes().items():
        op = spec["paths"][route.path][route.method.lower()]
        assert "422" in op["responses"] and "503" in op["responses"], name


def test_mcp_tools_take_their_schemas_from_the_same_models(kernel):
    import anyio

    from graph.transports.mcp import create_server

    tools = {t.name: t for t in anyio.run(create_server(kernel).list_tools)}
    assert set(tools) == set(CAPABILITIES)
    for name, cap in CAPABILITIES.items():
        schema = dict(tools[name].input_schema)
        if cap.keyed:  # the one argument beside the model's fields
            schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "idempotency_key"}
        assert schema == cap.input_model.model_json_schema(), name
        assert (
            tools[name].output_schema["properties"].keys() == cap.output_model.model_json_schema()["properties"].keys()
        ), name


def test_the_client_in_process_and_the_kernel_give_the_same_answers(kernel):
    c = Client.local(kernel=kernel)
    out = c.run_cycle(["IBM"], "2012-06-01", memory="off")
    assert c.replay(out.session_id).cycles[0]["contracts"]["EXECUTING"]["data"] == out.contracts["EXECUTING"]
    with pytest.raises(E.BadInput, match="as_of"):
        c.run_cycle(["IBM"], "June 1st")
