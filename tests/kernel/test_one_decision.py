"""One decision per paused cycle: two approvals racing on a real `serve` (two HTTP requests released together) or
as two `tradegraph approve` processes started together: exactly one resumes the cycle, the other is refused
(409 / exit 2) naming who decided and when, and the store holds exactly one approval_decided event and at most
one fill for the cycle."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

from database.connection import connect
from tests.kernel import local_http
from tests.kernel.servers import REPO

pytestmark = pytest.mark.integration
AS_OF = "2012-06-01"
WHEN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


# the kernel tests' shared server, execution allowed over HTTP (tests/kernel/conftest.py)
@pytest.fixture(scope="module")
def db_uri(executing_server):
    return executing_server.db_uri


@pytest.fixture(scope="module")
def http_url(executing_server):
    return executing_server.url


def decisions(db_uri: str, session_id: str) -> tuple[list[dict], list[dict], int]:
    """(approval_decided payloads, refused-approval payloads, ledger entries) of the session, read from the store."""
    with connect(db_uri) as store:
        decided = [e["payload"] for e in store.events.read(session_id, kind="approval_decided")]
        validations = [e["payload"] for e in store.events.read(session_id, kind="validation")]
        fills = store.executions.col.count_documents({"session_id": session_id})
    return decided, [v for v in validations if v.get("check") == "approval_refused_decided"], fills


def paused_cycle(http_url: str) -> str:
    r = local_http.post(
        f"{http_url}/cycles",
        json={"symbols": ["AAPL", "MSFT"], "as_of": AS_OF, "memory": "off", "approve": True},
        timeout=300,
    )
    assert r.status_code == 200 and r.json()["status"] == "pending_approval", r.text
    return r.json()["session_id"]


def race(calls: list) -> list:
    """Run the calls in threads released by one barrier; their results in order."""
    gate, out = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i):
        gate.wait()
        out[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out


@pytest.mark.parametrize("decisions_sent", [(True, True), (True, False)], ids=["approve-approve", "approve-reject"])
def test_two_http_decisions_racing_one_wins_the_other_gets_409_naming_who_and_when(db_uri, http_url, decisions_sent):
    for attempt in range(3):  # three paused cycles: the race is run three times
        session = paused_cycle(http_url)
        names = [f"desk{i}-{attempt}" for i in range(len(decisions_sent))]
        responses = race(
            [
                lambda ok=ok, by=by, session=session: local_http.post(
                    f"{http_url}/sessions/{session}/approval", json={"approved": ok, "by": by}, timeout=300
                )
                for ok, by in zip(decisions_sent, names)
            ]
        )
        codes = sorted(r.status_code for r in responses)
        assert codes == [200, 409], [r.text for r in responses]
        winner = next(r for r in responses if r.status_code == 200)
        loser = next(r for r in responses if r.status_code == 409)
        winner_by = names[responses.index(winner)]
        err = loser.json()
        assert err["error"] == "conflict" and "\n" not in err["message"]
        assert f"by {winner_by} (via http)" in err["message"] and WHEN.search(err["message"]), err
        approvals, refused, fills = decisions(db_uri, session)
        assert [a["by"] for a in approvals] == [f"{winner_by} (via http)"]
        assert fills <= 1
        # the lost race is audited too, unless the loser came after the decision was complete
        assert len(refused) <= 1


def test_a_later_approval_names_the_decision_already_made(db_uri, http_url):
    session = paused_cycle(http_url)
    first = local_http.post(
        f"{http_url}/sessions/{session}/approval", json={"approved": True, "by": "alice"}, timeout=300
    )
    assert first.status_code == 200
    again = local_http.post(
        f"{http_url}/sessions/{session}/approval", json={"approved": True, "by": "bob"}, timeout=300
    )
    assert again.status_code == 409
    message = again.json()["message"]
    assert "no cycle waiting for approval" in message and "was approved by alice (via http) at" in message
    assert f"(it ended {first.json()['status']})" in message
    assert len(decisions(db_uri, session)[0]) == 1


def test_two_cli_approvals_racing_one_wins_the_other_exits_2(db_uri, http_url, tmp_path):
    session = paused_cycle(http_url)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",)}
    env.update(
        {
            "MONGODB_URI": db_uri,
            "PYTHONPATH": str(REPO),
            "TRADEGRAPH_LLM": "offline",
            "TRADEGRAPH_HOME": str(tmp_path / "home"),
        }
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "graph.transports.cli.main", "approve", session, "--by", name],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("carol", "dave")
    ]
    results = [(p.wait(300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    winner = ("carol", "dave")[[code for code, _, _ in results].index(0)]
    _, _, stderr = next(r for r in results if r[0] == 2)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"by {winner}" in lines[0] and WHEN.search(lines[0]), stderr
    approvals, _, fills = decisions(db_uri, session)
    assert [a["by"] for a in approvals] == [winner] and fills <= 1
