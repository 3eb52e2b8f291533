"""Live export: with OTEL_EXPORTER_OTLP_ENDPOINT set, each cycle's spans reach the collector as the cycle ends
(decoded by a loopback receiver), the same spans `tradegraph export otel` sends; a dead or hanging collector
never fails a cycle nor holds it past the exporter's timeout, and the failure is in the cycle's audit."""

import logging
import time

import pytest

from graph.machine.runner import approve_cycle, run_state_machine
from graph.services.replay.session import load_session_log
from graph.services.telemetry import live
from graph.services.telemetry.export import send, spans_of
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.helpers import mock_store, services_with
from tests.integration.test_otel_export import OTEL_VARS, assert_matches_audit, closed_port, kind

pytestmark = pytest.mark.integration

SYMBOL, AS_OF = "AAPL", "2012-06-01"


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(live, "COOLDOWN", live.Cooldown())  # no endpoint remembered from another test


def cycle(store=None, **kw):
    store = store or mock_store()
    started = time.perf_counter()
    out = run_state_machine(SYMBOL, AS_OF, store=store, services=services_with(), **kw)
    return store, out, time.perf_counter() - started


def telemetry_events(store, out):
    return [e["payload"] for e in store.events.read(out.session_id, kind="telemetry")]


def test_each_cycle_reaches_the_collector_as_it_ends(monkeypatch):
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        store, first, _ = cycle()
        assert len(receiver.requests) == 1
        _, second, _ = cycle(store, session_id=first.session_id)
        assert len(receiver.requests) == 2
        for request, out in zip(receiver.requests, (first, second)):
            assert_matches_audit(request, store.events.read(out.session_id, cycle_id=out.cycle_id))
        # the live path and the after-the-fact export build the very same spans
        with OtlpReceiver() as again:
            send(spans_of(store, first.session_id), again.endpoint + "/v1/traces")
        key = lambda s: (s["trace_id"], s["span_id"], s["parent_span_id"], s["start_ns"], s["end_ns"])  # noqa
        assert sorted(map(key, receiver.spans)) == sorted(map(key, again.spans))
    assert telemetry_events(store, second) == []


def test_a_dead_collector_neither_fails_nor_holds_the_cycle_and_is_audited(monkeypatch, caplog):
    _, _, baseline = cycle()  # the same cycle with no endpoint, for the time it takes here
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    with caplog.at_level(logging.WARNING, logger="graph.services.telemetry.live"):
        store, out, took = cycle()
    assert out.status == "completed" and out.error is None
    assert took < baseline + 1.0 + 1.0  # the exporter's 1 s timeout, plus slack for a busy machine
    [failure] = telemetry_events(store, out)
    assert failure["ok"] is False and failure["skipped"] is False and failure["endpoint"] == f"{url}/v1/traces"
    assert "Connection refused" in failure["error"] and failure["type"] == "OtelExportFailed"
    assert [r for r in caplog.records if out.cycle_id in r.getMessage() and r.levelno == logging.WARNING]
    # the failed endpoint is left alone for a while: the next cycle records a skip and waits for nothing
    _, skipped, took = cycle(store, session_id=out.session_id)
    assert skipped.status == "completed" and took < baseline + 0.5
    [skip] = telemetry_events(store, skipped)[1:]
    assert skip["skipped"] is True and f"tradegraph export otel {out.session_id}" in skip["error"]
    # the failure event leaves the cycle's story alone: same status on replay, and no span of its own
    assert store.events.verify_chain(out.session_id)["ok"]
    assert [c.status for c in load_session_log(store, out.session_id).cycles] == ["completed", "completed"]
    assert len(spans_of(store, out.session_id, out.cycle_id)) == 27  # 8 states, 13 chat, 5 tools, the root


def test_a_hanging_collector_holds_the_cycle_no_longer_than_the_timeout(monkeypatch):
    _, _, baseline = cycle()
    with OtlpReceiver(delay_s=4) as hanging:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", hanging.endpoint + "/v1/traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
        store, out, took = cycle()
        assert out.status == "completed"
        assert took < baseline + 1.0 + 1.0
        [failure] = telemetry_events(store, out)
        assert "timed out" in failure["error"] and hanging.posts >= 1


def test_a_paused_cycle_is_exported_once_when_it_ends(monkeypatch):
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        store, paused, _ = cycle(approve=True)
        assert paused.status == "pending_approval" and receiver.requests == []
        done = approve_cycle(paused.session_id, store=store, approved=True, by="alice", services=services_with())
        assert done.status == "completed" and len(receiver.requests) == 1
        spans = receiver.spans
        assert_matches_audit(spans, store.events.read(done.session_id))
        assert sum(kind(s) == "state" for s in spans) == 8


def test_sdk_disabled_sends_nothing(monkeypatch):
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        store, out, _ = cycle()
        assert out.status == "completed" and receiver.posts == 0 and telemetry_events(store, out) == []


def test_a_setting_tradegraph_cannot_honour_is_audited_not_fatal(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    store, out, _ = cycle()
    assert out.status == "completed"
    [failure] = telemetry_events(store, out)
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'" in failure["error"] and failure["type"] == "OtelConfigError"
