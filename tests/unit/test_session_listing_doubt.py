"""`sessions` never shows a doctored status as the log's truth (issue 28, hole 8): the listing reads summaries, a
cache of the log, and never the log itself; it marks a status it cannot vouch for from what it reads anyway: the
chain found broken when the summary was rebuilt (`store reindex`), a head recording another event than the one the
summary ends at, and with the audit key a head not signed by it. Stores edited through pymongo."""

from __future__ import annotations

from database.events import event_hash
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from tests.helpers import mock_store, services_with

KEY = "k" * 32


def one_cycle():
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    return store, out.session_id


def listed(store, sid: str):
    from graph.kernel.core import Kernel

    return next(s for s in Kernel(store).call("list_sessions", {"limit": 20}).sessions if s.session_id == sid)


def set_status(store, sid: str, status: str, *, rehash: bool) -> None:
    last = store.events.read(sid)[-1]
    assert last["kind"] == "cycle_ended"
    last["payload"]["status"] = status
    if rehash:
        last["hash"] = event_hash(last)
        store.db["chain_heads"].update_one({"_id": sid}, {"$set": {"hash": last["hash"]}})
    store.db["state_events"].replace_one({"session_id": sid, "seq": last["seq"]}, last)


def test_an_untouched_session_is_listed_without_doubt(capsys):
    store, sid = one_cycle()
    row = listed(store, sid)
    assert row.status == "completed" and row.doubt is None
    assert main(["sessions", "--db", store.uri]) == 0
    assert "(?)" not in capsys.readouterr().out


def test_a_status_edited_in_the_log_and_reindexed_is_flagged(capsys):
    store, sid = one_cycle()
    set_status(store, sid, "rejected", rehash=False)
    store.sessions.reindex()  # the summary now reads the doctored log
    row = listed(store, sid)
    n = store.events.count(sid)
    assert row.status == "rejected" and row.doubt == (
        f"its log failed its hash chain when last rebuilt (seq {n}: edited, removed or replaced)"
    )
    assert main(["sessions", "--db", store.uri]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("(?)") == 2 and f"(?) {sid}: status not vouched for" in out  # the status cell and its note


def test_a_rehashed_status_the_summary_has_not_seen_is_flagged_by_the_head():
    store, sid = one_cycle()
    set_status(store, sid, "rejected", rehash=True)  # chain consistent, head's hash moved: the summary ends elsewhere
    row = listed(store, sid)
    assert row.status == "completed" and row.doubt == (
        f"the event its summary ends at (seq {store.events.count(sid)}) is not the one its chain head records"
    )


def test_with_the_key_a_rehashed_status_is_flagged_by_the_head_signature(monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", KEY)
    store, sid = one_cycle()
    assert listed(store, sid).doubt is None
    set_status(store, sid, "rejected", rehash=True)
    store.sessions.reindex()
    row = listed(store, sid)
    assert row.status == "rejected" and "signature does not verify" in row.doubt
    # without the key the same consistent rewrite is not caught here (nor by --check-chain): --verify's status
    # comparison is what catches it (tests/unit/test_verify_doctored.py)
    monkeypatch.delenv("TRADEGRAPH_AUDIT_KEY")
    assert listed(store, sid).doubt is None
