"""A loopback OTLP/HTTP trace receiver for tests: it DECODES each ExportTraceServiceRequest it is sent (the
protobuf a real collector parses) into the plain span form graph/services/telemetry/tree.py draws, so a test asserts
on what crossed the wire, not on what the exporter meant to send.

`status` scripts the answer (e.g. 503) to test a collector that refuses; `delay_s` one that hangs.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TRACES_PATH = "/v1/traces"


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


def _attributes(kvs) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[dict[str, Any]]:
    """The spans of one OTLP/HTTP protobuf request, each with its resource's attributes."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    {
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None,
                        "name": s.name,
                        "kind": Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "attributes": _attributes(s.attributes),
                        "status": Status.StatusCode.Name(s.status.code).removeprefix("STATUS_CODE_"),
                        "status_message": s.status.message or None,
                        "events": [{"name": e.name, "attributes": _attributes(e.attributes)} for e in s.events],
                        "resource": resource,
                        "scope": ss.scope.name,
                    }
                )
    return spans


class OtlpReceiver:
    def __init__(self, status: int = 200, delay_s: float = 0.0):
        self.status, self.delay_s = status, delay_s
        self.requests: list[list[dict]] = []  # decoded spans, one list per request taken
        self.posts = 0  # every POST, refused ones included
        self.paths: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                with outer._lock:
                    outer.posts += 1
                    outer.paths.append(self.path)
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                status = outer.status if self.path == TRACES_PATH else 404
                if status == 200:
                    spans = decode(body)  # a body that is not OTLP protobuf fails the test here
                    with outer._lock:
                        outer.requests.append(spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the exporter gave up waiting: the fault under test

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def spans(self) -> list[dict]:
        with self._lock:
            return [s for request in self.requests for s in request]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
