"""A session's spans from the store, and one send through the OpenTelemetry SDK's OTLP/HTTP exporter, whose
failure comes back as one line naming the URL.

Headers (e.g. a backend's Authorization), TLS files, compression and the timeout are read by the SDK's
exporter from the standard OTEL_EXPORTER_OTLP_* variables; nothing here reads or logs them.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from opentelemetry.sdk.trace import ReadableSpan

from database.connection import Store
from graph.machine.errors import InputError, SessionNotFound
from graph.services.telemetry.settings import shown
from graph.services.telemetry.spans import SPAN_KINDS, kind_of, session_spans

# one request stays well under collectors' default body limits (the SDK's batch processor sends 512 too)
BATCH = 512
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
_quiet_lock = threading.Lock()


class CycleNotFound(InputError):
    """--cycle names no cycle of the session: the message lists the ones it has."""


class OtelExportFailed(RuntimeError):
    """The collector did not take the spans: one line naming the URL and why."""


def spans_of(store: Store, session_id: str, cycle_id: Optional[str] = None) -> list[ReadableSpan]:
    """A session's spans (or one cycle's), built from its events in the store."""
    events = store.events.read(session_id, cycle_id=cycle_id)
    if not events:
        if cycle_id is not None and store.events.exists(session_id):
            raise CycleNotFound(
                f"session '{session_id}' has no cycle '{cycle_id}' "
                f"(its cycles: {', '.join(store.events.cycle_ids(session_id))})"
            )
        raise SessionNotFound(store.admin_log.unknown_session(session_id))  # a deleted one says so
    return session_spans(session_id, events, cycle_id=cycle_id)


def counts(spans: list[ReadableSpan]) -> dict[str, int]:
    """Spans per kind: invoke_agent, state, chat, execute_tool."""
    tally = Counter(kind_of(dict(s.attributes or {})) for s in spans)
    return {k: tally.get(k, 0) for k in SPAN_KINDS} | {k: n for k, n in tally.items() if k not in SPAN_KINDS}


def send(spans: list[ReadableSpan], url: str, *, timeout_s: Optional[float] = None) -> None:
    """POST the spans to the collector, in batches; raises OtelExportFailed naming the URL. The SDK retries
    transient failures with backoff within its timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    witness = _witness()
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s, session=witness)
    try:
        for i in range(0, len(spans), BATCH):
            started, witness.requests = time.monotonic(), 0
            with _quiet_exporter():
                result = exporter.export(spans[i : i + BATCH])
            if result is not SpanExportResult.SUCCESS:
                raise OtelExportFailed(
                    f"could not export spans to {shown(url)}: {witness.last or 'the exporter refused the batch'} "
                    f"({witness.requests} request{'s' if witness.requests != 1 else ''} in "
                    f"{time.monotonic() - started:.1f} s)"
                )
    finally:
        exporter.shutdown()


def _witness():
    """A requests session that remembers how its last request went: the SDK's exporter returns only
    SUCCESS or FAILURE, and logs the cause only when it still means to retry."""
    import requests

    class Witness(requests.Session):
        last, requests = "", 0

        def request(self, *args, **kwargs):
            self.requests += 1
            try:
                response = super().request(*args, **kwargs)
            except Exception as e:
                self.last = _short(e)
                raise
            self.last = f"HTTP {response.status_code} {response.reason}".strip()
            return response

    return Witness()


@contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The SDK exporter logs its own report of a failure; ours is the one line that names the URL."""
    log = logging.getLogger(_EXPORTER_LOGGER)
    handler = logging.NullHandler()
    with _quiet_lock:
        log.addHandler(handler)
        propagate, log.propagate = log.propagate, False
        try:
            yield
        finally:
            log.propagate = propagate
            log.removeHandler(handler)


def _short(cause: object) -> str:
    # requests wraps a refused or timed-out connection in three layers of reprs: keep the OS's words
    text = " ".join(str(cause).split())
    errno = re.search(r"\[Errno -?\d+\] ([^\"'()]+)", text)
    if errno:
        return errno.group(1).strip()
    if "timed out" in text.lower():
        return "timed out"
    return text[:200]
