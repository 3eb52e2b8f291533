"""A LangGraph Studio run records its manifest as a CLI cycle does (graph/transports/studio.py), so `replay --verify` of a
brand-new Studio session re-executes it with the configuration and inputs it ran with, never "no manifest
recorded (an older session)"."""

from __future__ import annotations

import pytest

from database.connection import connect
from graph.services.replay.session import verify_session
from tests.integration.test_studio import _tail, dev_server  # noqa: F401 - the `langgraph dev` server fixture

pytestmark = pytest.mark.integration


def test_a_new_studio_session_has_a_manifest_and_verifies_with_it(dev_server, monkeypatch):
    from langgraph_sdk import get_sync_client

    url, home, log = dev_server
    client = get_sync_client(url=url)
    thread_id = client.threads.create()["thread_id"]
    runs = [
        client.runs.wait(thread_id, "tradegraph", input={"symbols": ["AAPL", "MSFT"], "as_of": day})
        for day in ("2012-06-01", "2012-06-04")
    ]
    for run in runs:
        assert isinstance(run, dict) and run.get("status") in ("completed", "rejected"), f"{run!r}\n{_tail(log)}"
    session_id = f"studio-{thread_id}"

    monkeypatch.setenv("TRADEGRAPH_HOME", str(home))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    store = connect()
    try:
        manifests = {e["cycle_id"]: e["payload"] for e in store.events.read(session_id, kind="manifest")}
        assert list(manifests) == [r["cycle_id"] for r in runs]
        for run, (cycle_id, manifest) in zip(runs, manifests.items()):
            # the first event of its cycle, its inputs the submitted ones and the book the run started from
            first = store.events.read(session_id, cycle_id=cycle_id)[0]
            assert first["kind"] == "manifest"
            inputs = manifest["inputs"]
            assert (inputs["symbols"], inputs["as_of"]) == (["AAPL", "MSFT"], run["scan"]["as_of"])
            assert inputs["approval_required"] is False
            # Studio runs recall no notes (docs/studio.md): the manifest says so
            assert manifest["config"]["memory"] == "off"
        # the second run started from the book the first left
        assert manifests[runs[1]["cycle_id"]]["inputs"]["portfolio"]["cash"] == pytest.approx(
            runs[0]["execution"]["portfolio_after"]["cash"]
        )
        report = verify_session(store, session_id)
    finally:
        store.close()
    assert report.ok, [(c.cycle_id, c.divergences, c.notes) for c in report.cycles]
    for verdict in report.cycles:
        assert not any("no manifest recorded" in n for n in verdict.notes), verdict.notes
