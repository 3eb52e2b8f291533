"""Every lookup of a deleted session names its deletion (issue 28, hole 11): the CLI's events, portfolio, approve,
run --session, export head and export otel, HTTP's GET …/events and …/portfolio, and MCP's read_events all answer
`unknown session 'X': deleted <when> by <who> …` from the admin log, as replay and sessions delete already did. The
one place that says it for the capabilities is Kernel.call; the two exports, which read the store directly, ask the
same AdminLog.unknown_session."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from database import connect
from graph.kernel.capabilities import CAPABILITIES
from graph.kernel.core import Kernel
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from graph.transports.http import create_app
from graph.transports.mcp.server import tool_for


@pytest.fixture
def deleted(capsys):
    """(store uri, session id) of a session of one cycle, deleted by alice."""
    uri = f"mongomock://named_{uuid.uuid4().hex[:8]}"
    with connect(uri) as store:
        sid = run_state_machine(["AAPL", "MSFT"], "2012-06-01", store=store, approve=True).session_id
    assert main(["sessions", "delete", sid, "--force", "--by", "alice", "--db", uri]) == 0
    capsys.readouterr()
    return uri, sid


LOOKUPS = {
    "events": lambda sid: ["events", sid],
    "portfolio": lambda sid: ["portfolio", sid],
    "approve": lambda sid: ["approve", sid, "--by", "bob"],
    "run --session": lambda sid: ["run", "--symbols", "AAPL", "--as-of", "2012-06-04", "--session", sid],
    "export head": lambda sid: ["export", "head", sid],
    "export otel": lambda sid: ["export", "otel", sid, "--stdout"],
}


@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_each_cli_lookup_of_a_deleted_session_names_the_deletion(deleted, capsys, lookup):
    uri, sid = deleted
    assert main([*LOOKUPS[lookup](sid), "--db", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"unknown session '{sid}': deleted " in err and " by alice " in err and "admin record 1" in err, err


def test_http_and_mcp_lookups_of_a_deleted_session_name_the_deletion(deleted):
    uri, sid = deleted
    with connect(uri) as store:
        kernel = Kernel(store)
        http = TestClient(create_app(kernel), base_url="http://127.0.0.1")
        for path in (f"/sessions/{sid}/events", f"/sessions/{sid}/portfolio"):
            r = http.get(path)
            assert r.status_code == 404, r.text
            assert f"unknown session '{sid}': deleted " in r.json()["message"] and " by alice " in r.json()["message"]
        answer = tool_for(kernel, CAPABILITIES["read_events"]).fn({"session_id": sid})
        text = answer.content[0].text
        assert answer.is_error and text.startswith("not_found: unknown session") and " by alice " in text, text


def test_a_session_never_stored_says_only_unknown(capsys):
    uri = f"mongomock://named_{uuid.uuid4().hex[:8]}"
    assert main(["events", "s-nothing", "--db", uri]) == 2
    err = capsys.readouterr().err
    assert "unknown session 's-nothing'" in err and "deleted" not in err and "admin log" not in err, err
