"""Human approval across two processes on the embedded store; approving twice never executes twice. The decision is
a process of its own, apart from the one that ran the cycle (this one); the read-backs and the refused second
approval run in process too."""

import json

import pytest

from tests.integration.test_cli import tg

pytestmark = pytest.mark.integration


def home(path) -> dict[str, str]:
    return {"TRADEGRAPH_HOME": str(path)}


def test_approve_in_another_process_then_nothing_pending(tmp_path, tradegraph):
    run = tradegraph("run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--json", **home(tmp_path))
    assert run.returncode == 0, run.stderr
    pending = json.loads(run.stdout)
    assert pending["status"] == "pending_approval"
    assert "EXECUTING" not in pending["contracts"] and pending["contracts"]["VALIDATING"]["passed"] is True

    ok = tg(["approve", pending["session_id"], "--by", "alice", "--json"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    done = json.loads(ok.stdout)
    assert done["status"] == "completed" and done["contracts"]["EXECUTING"]["status"] == "filled"

    again = tradegraph("approve", pending["session_id"], **home(tmp_path))
    assert again.returncode == 2 and "no cycle waiting for approval" in again.stderr

    read = tradegraph("events", pending["session_id"], **home(tmp_path))
    events = [json.loads(line) for line in read.stdout.splitlines()]
    approvals = [e["payload"] for e in events if e["kind"] == "approval_decided"]
    assert approvals == [{"approved": True, "by": "alice"}]
    fills = [e for e in events if e["kind"] == "tool_call" and e["payload"]["name"] == "submit_decision"]
    assert len(fills) == 1
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_reject_executes_nothing(tmp_path, tradegraph):
    run = tradegraph("run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--approve", "--json", **home(tmp_path))
    sid = json.loads(run.stdout)["session_id"]
    rej = tg(["approve", sid, "--reject", "--by", "bob", "--json"], tmp_path)
    assert rej.returncode == 0, rej.stderr
    out = json.loads(rej.stdout)
    assert out["status"] == "rejected" and "EXECUTING" not in out["contracts"] and "MEMORIZING" in out["contracts"]
    events = [json.loads(line) for line in tradegraph("events", sid, **home(tmp_path)).stdout.splitlines()]
    assert not [e for e in events if e["kind"] == "tool_call" and e["payload"]["name"] == "submit_decision"]
    assert [e["payload"]["by"] for e in events if e["kind"] == "approval_decided"] == ["bob"]
