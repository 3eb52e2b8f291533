"""`tradegraph store compact` gives back the space deleted sessions freed (issue 29): on the embedded store the
SQLite file (with its WAL) shrinks after sessions are deleted, and the command says by how much."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from database import connect
from database.compact import file_bytes
from graph.transports.cli.main import main

pytestmark = pytest.mark.integration


def _events(session: str, n: int) -> list[dict]:
    return [
        {
            "event_id": f"{session}-{i}",
            "session_id": session,
            "cycle_id": f"{session}:c1",
            "ts": 1_700_000_000.0 + i,
            "state": "ANALYZING",
            "kind": "llm_response",
            "payload": {"text": f"{session} {i} " + "analysis " * 400},
        }
        for i in range(n)
    ]


def test_deleted_sessions_are_given_back_to_the_disk(tg_home, capsys):
    store = connect()  # the embedded store in this test's home (one SQLite file per database)
    try:
        path = Path(store.db.command("dbStats")["db"])
        sessions = [f"s-{uuid.uuid4().hex[:12]}" for _ in range(4)]
        for sid in sessions:
            store.events.append(_events(sid, 300))
        store.sessions.fold_all()
        for sid in sessions:
            assert main(["sessions", "delete", sid, "--force", "--keep-memories"]) == 0
        capsys.readouterr()
        full = file_bytes(path)
        assert full > 5_000_000, full  # ~1,200 events of ~3.6 kB each were written, then deleted
        assert main(["store", "compact", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        after = file_bytes(path)
        assert out["how"] == "SQLite VACUUM" and out["bytes_before"] >= full and out["bytes_after"] == after
        assert after < full / 5, (full, after)
        assert out["bytes_reclaimed"] == out["bytes_before"] - after
        assert store.events.read(sessions[0]) == []  # and the store still answers
    finally:
        store.close()


def test_a_mongomock_store_has_nothing_to_give_back(capsys):
    assert main(["store", "compact", "--db", f"mongomock://c_{uuid.uuid4().hex[:8]}"]) == 0
    assert "0 reclaimed" in capsys.readouterr().out
