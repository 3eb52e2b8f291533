"""Live export: when an OTLP endpoint is configured, each cycle's spans leave as the cycle ends.

Same code path as `tradegraph export otel` (the spans are built from the cycle's stored events), and it
can neither fail a cycle nor slow it past the exporter's timeout: a failure is a logged warning and a
`telemetry` event in the cycle's audit, and the cycle's outcome is returned as it was. After one failed
export the endpoint is left alone for a while (later cycles record that they were skipped), so a dead
collector costs one timeout, not one per cycle of a backtest; the skipped cycles can be exported later.

Nothing of the OpenTelemetry SDK is imported unless an endpoint is set.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

from graph.machine.runner import after_cycle
from graph.services.telemetry.settings import configured, shown, traces_url
from schemas.events import new_event

log = logging.getLogger(__name__)

# a failed endpoint is not tried again for this long, per process
COOLDOWN_S = 60.0


class Cooldown:
    """Which endpoints failed recently, in this process."""

    def __init__(self, seconds: float = COOLDOWN_S):
        self.seconds = seconds
        self._failed: dict[str, float] = {}
        self._lock = threading.Lock()

    def waiting(self, url: str) -> Optional[float]:
        """Seconds since the endpoint failed, while it is still cooling down; else None."""
        with self._lock:
            since = self._failed.get(url)
        if since is None or time.monotonic() - since >= self.seconds:
            return None
        return time.monotonic() - since

    def failed(self, url: str) -> None:
        with self._lock:
            self._failed[url] = time.monotonic()

    def recovered(self, url: str) -> None:
        with self._lock:
            self._failed.pop(url, None)


COOLDOWN = Cooldown()


@after_cycle  # the runner calls it after every audited cycle of a process that imported this module
def export_ended_cycle(store, session_id: str, cycle_id: str) -> Optional[dict[str, Any]]:
    """The runner's hook, called once a cycle has ended and its events are stored. Returns the audited
    failure (None: exported, or no endpoint set); never raises."""
    if not configured():
        return None
    url = None
    try:
        from graph.services.telemetry.export import send, spans_of

        url = traces_url()
        if url is None:  # configured() found an endpoint variable set: never None here
            return None
        cooling = COOLDOWN.waiting(url)
        if cooling is not None:
            return _failed(
                store,
                session_id,
                cycle_id,
                shown(url),
                None,
                skipped=True,
                error=f"skipped: {shown(url)} failed {cooling:.0f} s ago (retried after "
                f"{COOLDOWN.seconds:.0f} s); export later with `tradegraph export otel {session_id}`",
            )
        spans = spans_of(store, session_id, cycle_id)
        send(spans, url)
        COOLDOWN.recovered(url)
        return None
    except Exception as e:  # noqa: BLE001 - telemetry never fails a cycle: a failure is a warning and an audited event
        if url is not None:
            COOLDOWN.failed(url)
        return _failed(
            store,
            session_id,
            cycle_id,
            shown(url) if url else None,
            e,
            skipped=False,
            error=" ".join(str(e).split()) or type(e).__name__,
        )


def _failed(
    store,
    session_id: str,
    cycle_id: str,
    url: Optional[str],
    exc: Optional[BaseException],
    *,
    skipped: bool,
    error: str,
) -> dict[str, Any]:
    payload = {
        "exporter": "otlp_http",
        "endpoint": url,
        "ok": False,
        "skipped": skipped,
        "type": type(exc).__name__ if exc is not None else None,
        "error": error,
    }
    log.warning("OpenTelemetry export of cycle %s: %s", cycle_id, error)
    try:
        with store.writer(background=False) as writer:
            writer.put(new_event(session_id, cycle_id, "RUNNER", "telemetry", payload))
    except Exception as e:  # noqa: BLE001 - the store went away too: the warning above is all that can be said
        log.warning("could not audit the failed OpenTelemetry export of cycle %s: %s", cycle_id, e)
    return payload
