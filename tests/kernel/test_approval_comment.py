"""A decision's comment: taken on every transport (CLI flag, the kernel's input, so HTTP, MCP and the console),
audited on the approval event, shown by replay, and re-executed identically by verify."""

from __future__ import annotations

import json
import uuid

import pytest

from graph.kernel import errors as E
from graph.kernel.core import Kernel
from graph.services.replay.session import load_session_log, verify_session
from graph.transports.cli.main import main


@pytest.fixture
def db():
    return f"mongomock://ac_{uuid.uuid4().hex[:10]}"


def _paused(db, capsys) -> str:
    assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--json", "--db", db]) == 0
    return json.loads(capsys.readouterr().out)["session_id"]


@pytest.mark.parametrize("reject", [False, True])
def test_a_comment_is_audited_with_the_decision_and_replays_identically(db, capsys, reject):
    sid = _paused(db, capsys)
    said = "stop too tight for earnings week" if reject else "sized fine; go"
    args = ["approve", sid, "--by", "carol", "--comment", said, "--json", "--db", db] + (["--reject"] if reject else [])
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["status"] == ("rejected" if reject else "completed")
    k = Kernel.open(db)
    try:
        events = k.store.events.read(sid)
        approvals = [e["payload"] for e in events if e["kind"] == "approval_decided"]
        assert approvals == [{"approved": not reject, "by": "carol", "comment": said}]
        assert load_session_log(k.store, sid).cycles[-1].approval == {
            "approved": not reject,
            "by": "carol",
            "comment": said,
        }
        report = verify_session(k.store, sid)
    finally:
        k.close()
    assert report.identical and not report.unreadable


def test_a_decision_without_a_comment_is_recorded_as_before(db, capsys):
    sid = _paused(db, capsys)
    assert main(["approve", sid, "--by", "dan", "--json", "--db", db]) == 0
    capsys.readouterr()
    k = Kernel.open(db)
    try:
        approvals = [e["payload"] for e in k.store.events.read(sid, kind="approval_decided")]
    finally:
        k.close()
    assert approvals == [{"approved": True, "by": "dan"}]


def test_an_overlong_comment_is_bad_input_and_decides_nothing(db, capsys):
    sid = _paused(db, capsys)
    k = Kernel.open(db)
    try:
        with pytest.raises(E.BadInput, match="comment"):
            k.call("approve", {"session_id": sid, "by": "erin", "comment": "x" * 501})
        with pytest.raises(E.BadInput, match="comment"):
            k.call("approve", {"session_id": sid, "by": "erin", "comment": ""})
        listing = k.call("list_sessions", {})
    finally:
        k.close()
    assert [s.status for s in listing.sessions if s.session_id == sid] == ["pending_approval"]
