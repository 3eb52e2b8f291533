"""Deleting sessions on every transport: `sessions delete` and `sessions prune` (with --dry-run) on the CLI, the
same capabilities over HTTP and MCP behind TRADEGRAPH_ALLOW_DELETE; every deletion in the admin log with the
session's chain head, and `replay --check-chain` of a deleted session saying so (exit 2, as for an unknown one)."""

from __future__ import annotations

import time
import uuid

import pytest

from database import connect
from graph.kernel import errors as E
from graph.kernel.core import Kernel
from graph.machine.runner import run_state_machine
from graph.services.replay.session import verify_session
from graph.transports.cli.main import main
from tests.kernel import local_http
from tests.kernel.servers import McpToolError, free_port, mcp_stdio, serve, server_env

pytestmark = pytest.mark.integration


@pytest.fixture
def db(embedded_uri):
    return f"{embedded_uri}/retention_{uuid.uuid4().hex[:8]}"


def recorded(db: str, day: str = "2012-03-01", verify: bool = True) -> tuple[str, str | None]:
    """A session of one real cycle (memory on: it writes notes) and, if asked, its replay session."""
    with connect(db) as store:
        sid = run_state_machine(["AAPL", "MSFT"], day, store=store).session_id
        rid = verify_session(store, sid).replay_session_id if verify else None
    return sid, rid


def test_cli_dry_run_delete_admin_record_and_check_chain(db, capsys):
    sid, rid = recorded(db)
    with connect(db) as store:
        head = store.events.heads.get(sid)
        notes = store.memories.col.count_documents({"session_id": sid})
        assert notes > 0 and head.seq == store.events.count(sid)

    assert main(["sessions", "delete", sid, "--dry-run", "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"would delete {sid} (run)" in out and f"would delete {rid} (replay, replay of {sid})" in out
    assert "nothing deleted (2 session(s) would be)" in out
    # written to moments ago: refused unless forced (its writer may still be running)
    assert main(["sessions", "delete", sid, "--db", db]) == 2
    assert "written to" in capsys.readouterr().err
    with connect(db) as store:
        assert store.events.exists(sid) and store.sessions.get(sid) and not store.admin_log.records()

    assert main(["sessions", "delete", sid, "--force", "--by", "alice", "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"deleted {sid} (run): {head.seq} event(s)" in out and "admin log record 1" in out
    with connect(db) as store:
        for gone in (sid, rid):
            assert not store.events.exists(gone) and store.sessions.get(gone) is None
            assert store.events.heads.get(gone) is None and not store.events.cycle_ids(gone)
        assert store.portfolios.load(sid) is None and not store.executions.committed(sid)
        assert store.memories.col.count_documents({"session_id": sid}) == 0
        started, done = store.admin_log.records(sid)
        assert (started["phase"], started["by"], started["events"]) == ("started", "alice", head.seq)
        assert started["head"]["seq"] == head.seq and started["head"]["hash"] == head.hash
        assert done["removed"]["state_events"] == head.seq and done["removed"]["memories"] == notes
        assert done["removed"]["portfolios"] == 1 and store.admin_log.verify()["ok"]
        # its payload packs went with its events: none is left naming it
        assert done["removed"]["state_blobs"] > 0 and not store.events.blobs.col.find_one({"sessions": sid})

    for argv in (["replay", sid, "--check-chain"], ["replay", sid], ["sessions", "delete", sid]):
        assert main([*argv, "--db", db]) == 2
        err = capsys.readouterr().err
        assert f"unknown session '{sid}': deleted" in err and "by alice" in err, err
        assert f"seq {head.seq}, hash {head.hash}" in err, err
    assert main(["sessions", "--all", "--json", "--db", db]) == 0
    assert capsys.readouterr().out == ""


def test_cli_prune_by_age_and_kind(db, capsys):
    kept, replay = recorded(db)
    time.sleep(1.1)
    assert main(["sessions", "prune", "--older-than", "1s", "--kind", "replay", "--dry-run", "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"would delete {replay}" in out and f"would delete {kept} " not in out
    assert main(["sessions", "prune", "--older-than", "30d", "--db", db]) == 0
    assert "no session last written more than 30d ago: nothing to delete" in capsys.readouterr().out
    assert main(["sessions", "prune", "--older-than", "1s", "--kind", "replay", "--force", "--db", db]) == 0
    assert f"deleted {replay}" in capsys.readouterr().out
    with connect(db) as store:
        assert store.events.exists(kept) and not store.events.exists(replay)
        record = store.admin_log.records(replay)[0]
        assert record["reason"] == "sessions prune --older-than 1s --kind replay"
    assert main(["sessions", "prune", "--older-than", "two days", "--db", db]) == 2
    assert "older_than" in capsys.readouterr().err


def test_the_policy_per_transport(db):
    sid, _ = recorded(db, verify=False)
    with connect(db) as store:
        k = Kernel(store, env={"TRADEGRAPH_ALLOW_DELETE": "mcp"})
        with pytest.raises(E.Forbidden, match="TRADEGRAPH_ALLOW_DELETE=http"):
            k.call("delete_session", {"session_id": sid, "force": True}, transport="http")
        dry = k.call("delete_session", {"session_id": sid, "dry_run": True}, transport="http")
        assert [d.session_id for d in dry.sessions] == [sid] and store.events.exists(sid)
        out = k.call("delete_session", {"session_id": sid, "force": True, "by": "bot"}, transport="mcp")
        assert out.sessions[0].admin_seq == 1 and store.admin_log.records(sid)[0]["by"] == "bot (via mcp)"


def test_http_and_mcp_delete_and_prune(db, tmp_path):
    sid, rid = recorded(db)
    other, _ = recorded(db, "2012-03-02", verify=False)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    allowed = server_env(db, tmp_path / "home", TRADEGRAPH_ALLOW_DELETE="http")
    with serve(["serve", "--port", str(port)], allowed, tmp_path, f"{base}/store"):
        listed = local_http.get(f"{base}/sessions", params={"all": True}).json()["sessions"]
        assert {s["session_id"] for s in listed} == {sid, rid, other}
        assert {s["session_id"] for s in local_http.get(f"{base}/sessions").json()["sessions"]} == {sid, other}
        r = local_http.delete(f"{base}/sessions/{sid}", params={"force": True, "by": "carol"})
        assert r.status_code == 200, r.text
        assert [d["session_id"] for d in r.json()["sessions"]] == [sid, rid]
        r = local_http.delete(f"{base}/sessions/{sid}")
        assert r.status_code == 404 and "deleted" in r.json()["message"] and "carol (via http)" in r.json()["message"]
        r = local_http.post(f"{base}/sessions/prune", json={"older_than": "1w"})
        assert r.status_code == 200 and r.json()["sessions"] == []
    # over MCP without TRADEGRAPH_ALLOW_DELETE: a dry run answers, a deletion is refused naming the setting
    with mcp_stdio(server_env(db, tmp_path / "home"), tmp_path) as mcp:
        dry = mcp("prune_sessions", {"older_than": "1s", "dry_run": True})
        assert [d.session_id for d in dry.sessions] == [other]
        with pytest.raises(McpToolError, match="forbidden: .*TRADEGRAPH_ALLOW_DELETE=mcp"):
            mcp("delete_session", {"session_id": other, "force": True})
    with connect(db) as store:
        assert store.events.exists(other) and not store.events.exists(sid)
        assert [r["by"] for r in store.admin_log.records() if r["phase"] == "started"] == ["carol (via http)"] * 2
