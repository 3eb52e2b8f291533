"""Listing sessions on the embedded store: from the summaries alone (never a command on `state_events`, counted on
the wire), and honest after a writer is SIGKILLed mid-cycle: the listing says the summary is behind (or the session
not summarised yet), the session's next cycle catches it up, and `tradegraph store reindex` rebuilds the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from pymongo import MongoClient, monitoring

from database import connect
from graph.kernel.core import Kernel
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from tests.unit.test_session_summaries import from_log, summary

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


class Commands(monitoring.CommandListener):
    """Every command a client sends, with the collection it names."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event) -> None:
        target = event.command.get(event.command_name)
        self.sent.append((event.command_name, target if isinstance(target, str) else ""))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def test_listing_sends_no_command_to_the_log(embedded_uri):
    from database.connection import _build

    uri = f"{embedded_uri}/listing_{uuid.uuid4().hex[:8]}"
    with connect(uri) as store:
        sids = [run_state_machine(["AAPL"], day, store=store).session_id for day in ("2012-03-01", "2012-03-02")]
    listener = Commands()
    client = MongoClient(uri, event_listeners=[listener])
    try:
        kernel = Kernel(_build(uri, client, client.get_default_database()))
        listener.sent.clear()
        out = kernel.call("list_sessions", {"limit": 50})
    finally:
        client.close()
    assert {s.session_id for s in out.sessions} == set(sids)
    collections = {c for _, c in listener.sent}
    assert "sessions" in collections, listener.sent  # the listener does see what listing reads
    assert "state_events" not in collections, listener.sent


CHILD = """
import sys
from database import connect
from graph.machine.runner import run_state_machine
store = connect(sys.argv[1])
run_state_machine(["AAPL", "MSFT", "IBM", "GOOG"], sys.argv[2], store=store, session_id=sys.argv[3] or None)
print("cycle ended before the kill", flush=True)
"""


def kill_mid_cycle(uri: str, day: str, session_id: str, at_least: dict) -> None:
    """A real cycle in another process, SIGKILLed once the log holds `at_least` more events than the chain heads
    had before (mid-cycle: a 4-symbol cycle writes ~200)."""
    store = connect(uri)
    try:
        heads = store.events.heads.col
        before = {h["_id"]: h["seq"] for h in heads.find({})}
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, uri, day, session_id],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            grown = [h for h in heads.find({}) if h["seq"] - before.get(h["_id"], 0) >= at_least["events"]]
            if grown:
                break
            assert proc.poll() is None, "the cycle ended before it was killed"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL and not proc.stdout.read()
    finally:
        store.close()


def test_a_killed_writer_leaves_the_listing_honest_and_reindex_repairs_it(embedded_uri):
    uri = f"{embedded_uri}/killed_{uuid.uuid4().hex[:8]}"
    with connect(uri) as store:
        sid = run_state_machine(["AAPL"], "2012-03-01", store=store).session_id
        folded = summary(store, sid)

    # 1. a writer of the session killed mid-cycle: the listing shows the summary as it was, and how far behind
    kill_mid_cycle(uri, "2012-03-02", sid, {"events": 40})
    with _Opened(uri) as k:
        listed = {s.session_id: s for s in k.call("list_sessions", {}).sessions}
        assert listed[sid].events == folded["events"] and listed[sid].behind >= 40
        assert summary(k.store, sid) == folded != from_log(k.store, sid)
        # its next cycle here reads what the killed one wrote from the log
        run_state_machine(["AAPL"], "2012-03-05", store=k.store, session_id=sid)
        assert summary(k.store, sid) == from_log(k.store, sid)
        assert k.call("list_sessions", {}).sessions[0].behind == 0

    # 2. a first cycle killed: no summary yet, and the listing says a session is missing from it
    kill_mid_cycle(uri, "2012-03-02", "", {"events": 40})
    with _Opened(uri) as k:
        out = k.call("list_sessions", {})
        assert [s.session_id for s in out.sessions] == [sid] and out.unsummarised == 1
        orphan = next(h["_id"] for h in k.store.events.heads.col.find({}) if h["_id"] != sid)
    assert main(["store", "reindex", "--db", uri]) == 0
    with _Opened(uri) as k:
        out = k.call("list_sessions", {})
        assert {s.session_id for s in out.sessions} == {sid, orphan} and out.unsummarised == 0
        for s in (sid, orphan):
            assert summary(k.store, s) == from_log(k.store, s)
        assert summary(k.store, orphan)["status"] == "cut_off"


class _Opened:
    """A kernel on its own store, closed after."""

    def __init__(self, uri: str) -> None:
        self.kernel = Kernel(connect(uri))

    def __enter__(self) -> Kernel:
        return self.kernel

    def __exit__(self, *exc) -> None:
        self.kernel.close()
