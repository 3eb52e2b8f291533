"""`tradegraph export otel`: a recorded session, sent as OpenTelemetry GenAI spans to a loopback OTLP/HTTP
receiver that decodes the protobuf it gets; every assertion is on what crossed the wire, checked against the
session's audit events."""

import socket
from collections import Counter

import pytest

from agent.config import AgentConfig
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.telemetry.settings import OtelConfigError, traces_url
from graph.transports.cli.main import main
from schemas.states import STATES
from tests.fakes.fake_openai import FakeOpenAI, Fault
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.helpers import mock_store, services_with

pytestmark = pytest.mark.integration

SYMBOL, AS_OF = "AAPL", "2012-06-01"
OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_SDK_DISABLED",
)


@pytest.fixture(autouse=True)
def no_otel_env(monkeypatch):
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def receiver():
    with OtlpReceiver() as r:
        yield r


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recorded(services=None, cycles: int = 1):
    store = mock_store()
    out = run_state_machine(SYMBOL, AS_OF, store=store, services=services or services_with())
    for _ in range(cycles - 1):
        out = run_state_machine(
            SYMBOL, AS_OF, store=store, services=services or services_with(), session_id=out.session_id
        )
    return store, out


def export(store, session_id, *args):
    return main(["export", "otel", session_id, "--db", store.uri, *args])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def by_id(spans):
    return {s["span_id"]: s for s in spans}


def kind(span):
    return span["attributes"].get("gen_ai.operation.name", "state")


def assert_matches_audit(spans, events, status="completed"):
    """The decoded spans of ONE cycle against its audit events: the tree, the tokens, the tools."""
    ids = by_id(spans)
    assert len(ids) == len(spans)  # no span id twice
    assert len({s["trace_id"] for s in spans}) == 1
    roots = [s for s in spans if s["parent_span_id"] is None]
    assert [kind(r) for r in roots] == ["invoke_agent"] and roots[0]["name"] == "invoke_agent tradegraph"
    root = roots[0]
    a = root["attributes"]
    cycle_id = events[0]["cycle_id"]
    assert (a["gen_ai.conversation.id"], a["session.id"], a["tradegraph.cycle_id"]) == (
        events[0]["session_id"],
        events[0]["session_id"],
        cycle_id,
    )
    assert (a["tradegraph.cycle.status"], a["tradegraph.symbols"], a["tradegraph.as_of"]) == (status, [SYMBOL], AS_OF)
    states = [s for s in spans if kind(s) == "state"]
    assert all(s["parent_span_id"] == root["span_id"] for s in states)
    entered = [e["payload"]["to"] for e in events if e["kind"] == "transition" and e["payload"]["to"] != "END"]
    assert [s["name"] for s in sorted(states, key=lambda s: s["start_ns"])] == entered
    # one chat span per LLM attempt, under the state that made it, with the tokens the audit recorded
    answers = {e["run_id"]: e for e in events if e["kind"] == "llm_response"}
    # an attempt that failed with no answer reported no usage (the audit counts it as zero for the spend)
    usage = {
        rid: {} if e["payload"].get("error") and e["payload"].get("text") is None else e["payload"]["usage"]
        for rid, e in answers.items()
    }
    audited = Counter(
        (
            e["state"],
            e["payload"]["attempt"],
            usage[e["run_id"]].get("input_tokens"),
            usage[e["run_id"]].get("output_tokens"),
        )
        for e in events
        if e["kind"] == "llm_request"
    )
    chats = [s for s in spans if kind(s) == "chat"]
    exported = Counter(
        (
            ids[s["parent_span_id"]]["name"],
            s["attributes"]["tradegraph.llm.attempt"],
            s["attributes"].get("gen_ai.usage.input_tokens"),
            s["attributes"].get("gen_ai.usage.output_tokens"),
        )
        for s in chats
    )
    assert exported == audited and sum(audited.values()) > 0
    assert root["attributes"]["gen_ai.usage.input_tokens"] == sum(
        (e["payload"]["usage"].get("input_tokens") or 0) for e in answers.values()
    )
    assert all(s["name"] == f"chat {s['attributes']['gen_ai.request.model']}" and s["kind"] == "CLIENT" for s in chats)
    # one execute_tool span per audited tool call, under its state
    tools = [s for s in spans if kind(s) == "execute_tool"]
    assert Counter((ids[s["parent_span_id"]]["name"], s["attributes"]["gen_ai.tool.name"]) for s in tools) == Counter(
        (e["state"], e["payload"]["name"]) for e in events if e["kind"] == "tool_call"
    )
    assert all(s["name"] == f"execute_tool {s['attributes']['gen_ai.tool.name']}" for s in tools)
    # the trace looks like the run did: the events' own times, every child inside its parent
    first, last = min(e["ts"] for e in events), max(e["ts"] for e in events)
    assert abs(root["start_ns"] / 1e9 - first) < 1e-5 and abs(root["end_ns"] / 1e9 - last) < 1e-5
    for s in spans:
        assert s["start_ns"] <= s["end_ns"]
        if s["parent_span_id"]:
            parent = ids[s["parent_span_id"]]
            assert parent["start_ns"] <= s["start_ns"] and s["end_ns"] <= parent["end_ns"], s["name"]
    return root


# ---------------------------------------------------------------------------- after the fact
def test_a_completed_cycle_is_one_trace_of_8_states_its_attempts_and_tools(receiver, capsys):
    store, out = recorded()
    assert export(store, out.session_id, "--endpoint", receiver.endpoint) == 0
    assert receiver.paths == ["/v1/traces"]
    spans = receiver.spans
    events = store.events.read(out.session_id)
    assert_matches_audit(spans, events)
    assert [s["name"] for s in sorted((s for s in spans if kind(s) == "state"), key=lambda s: s["start_ns"])] == list(
        STATES
    )
    n = Counter(kind(s) for s in spans)
    assert n["chat"] == out.llm_calls == 13 and n["execute_tool"] == 5  # tools: the scan 2, the quant 2, the order 1
    # tool calls a model asked for carry the model's call id; a state's own calls (the scan) have none
    tools = {
        (s["attributes"]["gen_ai.tool.name"], s["attributes"].get("gen_ai.tool.call.id"))
        for s in spans
        if kind(s) == "execute_tool"
    }
    assert ("get_indicators", "call_quant_0") in tools and ("submit_decision", None) in tools
    assert {s["resource"]["service.name"] for s in spans} == {"tradegraph"}
    assert not [s for s in spans if s["status"] == "ERROR"]
    said = capsys.readouterr().out.strip().splitlines()
    assert said == [
        f"exported 27 spans of session {out.session_id} (1 cycle): 1 invoke_agent, 8 state, 13 chat, "
        f"5 execute_tool -> {receiver.endpoint}/v1/traces"
    ]


def test_exporting_twice_sends_the_same_ids_and_times(receiver):
    store, out = recorded(cycles=2)
    assert export(store, out.session_id, "--endpoint", receiver.endpoint) == 0
    assert export(store, out.session_id, "--endpoint", receiver.endpoint + "/v1/traces") == 0
    first, second = receiver.requests
    key = lambda s: (s["trace_id"], s["span_id"], s["parent_span_id"], s["name"], s["start_ns"], s["end_ns"])  # noqa
    assert sorted(map(key, first)) == sorted(map(key, second)) and len(first) == 54  # 27 per cycle
    assert len({s["trace_id"] for s in first}) == 2  # one trace per cycle


def test_cycle_flag_exports_that_cycle_alone(receiver, capsys):
    store, out = recorded(cycles=2)
    assert export(store, out.session_id, "--endpoint", receiver.endpoint, "--cycle", "c2") == 0
    spans = receiver.spans
    assert_matches_audit(spans, store.events.read(out.session_id, cycle_id=out.cycle_id))
    assert {s["attributes"].get("tradegraph.cycle_id") for s in spans} == {out.cycle_id, None}
    capsys.readouterr()
    assert export(store, out.session_id, "--endpoint", receiver.endpoint, "--cycle", "c7") == 2
    assert f"{out.session_id}:c7" in one_line(capsys) and receiver.posts == 1


def test_a_failed_attempt_is_an_error_span_with_its_http_status_and_the_retry_is_not(receiver, monkeypatch):
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
        fake.faults = [Fault(when="tools", status=500)]
        store, out = recorded(default_services(AgentConfig.from_env()))
    assert out.status == "completed"
    assert export(store, out.session_id, "--endpoint", receiver.endpoint) == 0
    spans = receiver.spans
    assert_matches_audit(spans, store.events.read(out.session_id))
    failed = [s for s in spans if s["status"] == "ERROR"]
    assert len(failed) == 1
    a = failed[0]["attributes"]
    assert (a["error.type"], a["http.response.status_code"], a["tradegraph.llm.attempt"]) == ("OpenAIAPIError", 500, 1)
    assert (a["gen_ai.provider.name"], a["gen_ai.request.model"], a["server.address"]) == (
        "openai",
        "gpt-4o-mini",
        "127.0.0.1",
    )
    assert "500" in failed[0]["status_message"] and "gen_ai.usage.input_tokens" not in a
    retried = [s for s in spans if kind(s) == "chat" and s["attributes"]["tradegraph.llm.attempt"] == 2]
    assert len(retried) == 1 and retried[0]["status"] == "UNSET"
    assert retried[0]["attributes"]["http.response.status_code"] == 200
    assert retried[0]["attributes"]["gen_ai.response.model"] == "gpt-4o-mini"


def test_a_cycle_that_failed_closed_marks_its_state_and_cycle_spans(receiver, monkeypatch):
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
        fake.faults = [Fault(status=503) for _ in range(4)]  # 1 attempt + 3 retries, all refused
        store, out = recorded(default_services(AgentConfig.from_env()))
    assert out.status == "failed" and out.error["state"] == "PLANNING"
    assert export(store, out.session_id, "--endpoint", receiver.endpoint) == 0
    spans = receiver.spans
    root = assert_matches_audit(spans, store.events.read(out.session_id), status="failed")
    assert root["status"] == "ERROR" and root["attributes"]["error.type"] == out.error["type"]
    planning = [s for s in spans if s["name"] == "PLANNING"][0]
    assert planning["status"] == "ERROR" and planning["attributes"]["error.type"] == out.error["type"]
    assert [e["attributes"]["exception.type"] for e in planning["events"] if e["name"] == "exception"] == [
        out.error["type"]
    ]
    attempts = [s["attributes"] for s in spans if kind(s) == "chat"]
    assert [(a["tradegraph.llm.attempt"], a["http.response.status_code"], a["error.type"]) for a in attempts] == [
        (n, 503, "OpenAIAPIError") for n in (1, 2, 3, 4)
    ]
    assert [s["name"] for s in spans if kind(s) == "state"] == ["SCANNING", "PLANNING"]


# ---------------------------------------------------------------------------- where to, and failures
def test_the_endpoint_comes_from_the_standard_variables(receiver, monkeypatch):
    store, out = recorded()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")  # the traces variable wins
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint + "/v1/traces")
    assert export(store, out.session_id) == 0
    assert len(receiver.spans) == 27


def test_no_endpoint_exits_2_naming_both_variables(capsys):
    store, out = recorded()
    assert export(store, out.session_id) == 2
    line = one_line(capsys)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in line and "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in line


def test_stdout_draws_the_tree_without_a_collector(capsys):
    store, out = recorded()
    assert export(store, out.session_id, "--stdout") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("invoke_agent tradegraph  [+0.0 ms") and f"session={out.session_id}" in lines[0]
    assert [line.split("  ")[1] for line in lines if line.startswith("  ") and not line.startswith("    ")] == list(
        STATES
    )
    assert sum(line.startswith("    chat offline-quick") for line in lines) == 13
    assert lines[-1].startswith("built 27 spans")


def test_an_unreachable_collector_exits_1_with_one_line_naming_its_url(capsys, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    store, out = recorded()
    url = f"http://127.0.0.1:{closed_port()}"
    assert export(store, out.session_id, "--endpoint", url) == 1
    line = one_line(capsys)
    assert f"{url}/v1/traces" in line and "could not export" in line


def test_a_collector_that_refuses_exits_1_naming_the_status(capsys):
    store, out = recorded()
    with OtlpReceiver(status=400) as refusing:
        assert export(store, out.session_id, "--endpoint", refusing.endpoint) == 1
    line = one_line(capsys)
    assert refusing.endpoint in line and "400" in line


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--endpoint", "localhost:4318"], "localhost:4318"),
        (["--endpoint", "http://collector:43x8"], "43x8"),
    ],
)
def test_a_bad_endpoint_exits_2_naming_it(capsys, args, needle):
    store, out = recorded()
    assert export(store, out.session_id, *args) == 2
    assert needle in one_line(capsys)


def test_an_unknown_session_exits_2_naming_it(receiver, capsys):
    store, _ = recorded()
    assert export(store, "s-nope", "--endpoint", receiver.endpoint) == 2
    assert "s-nope" in one_line(capsys) and receiver.posts == 0


def test_settings_follow_the_otlp_exporter_spec():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://cloud.example/api/public/otel/"}
    assert traces_url(env=env) == "https://cloud.example/api/public/otel/v1/traces"
    traces = {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4318/custom"}
    assert traces_url(env=traces) == "http://h:4318/custom"  # the signal's own variable is taken as it is
    assert traces_url(env={"OTEL_EXPORTER_OTLP_ENDPOINT": ""}) is None  # empty counts as unset
    with pytest.raises(OtelConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"):
        traces_url(env={**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(OtelConfigError, match="'ftp://collector'") as bad:  # a password never lands in a message
        traces_url("ftp://user:secret@collector")
    assert "secret" not in str(bad.value)
