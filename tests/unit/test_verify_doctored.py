"""`replay --verify` holds a recording to what it says (issue 28, holes 7 and 8): every event read through
parse_event, each cycle's recorded `cycle_ended` status compared with the re-executed one, each answer taken from
the response cache compared with the recorded answer it cites. Each test edits the stored documents as a store
writer without the audit key would: the event changed, every later event re-hashed and the chain head moved onto
the new end, so the hash chain itself is intact and only these comparisons can tell."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

from database.events import event_hash
from graph.services.replay.session import verify_session
from graph.transports.cli.main import main
from tests.helpers import mock_store

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "v1_short_cycle.jsonl.gz"


def recorded():
    """The kept short cycle (it filled one order, cycle_ended completed) in a fresh store."""
    with gzip.open(RECORDING, "rt") as f:
        header, *events = [json.loads(line) for line in f]
    store = mock_store()
    store.events.append([{k: v for k, v in e.items() if k not in ("seq", "prev_hash", "hash")} for e in events])
    return store, header["session_id"]


def rewrite(store, sid: str, seq: int, edit: Callable[[dict], None]) -> None:
    """The event at seq edited, it and every later event re-chained, the head moved onto the new end."""
    docs = store.events.read(sid)
    prev = docs[seq - 2]["hash"] if seq > 1 else "0" * 64
    for d in docs[seq - 1 :]:
        d["prev_hash"] = prev
        if d["seq"] == seq:
            edit(d)
        d["hash"] = prev = event_hash(d)
        store.db["state_events"].replace_one({"session_id": sid, "seq": d["seq"]}, d)
    store.db["chain_heads"].update_one({"_id": sid}, {"$set": {"hash": prev}})


def append_raw(store, sid: str, doc: dict) -> int:
    """A document put after the log's end by hand (seq, chain and head made to fit); returns its seq."""
    last = store.events.read(sid)[-1]
    doc = {**doc, "session_id": sid, "seq": last["seq"] + 1, "prev_hash": last["hash"]}
    doc["hash"] = event_hash(doc)
    store.db["state_events"].insert_one(dict(doc))
    store.db["chain_heads"].update_one({"_id": sid}, {"$set": {"seq": doc["seq"], "hash": doc["hash"]}})
    return doc["seq"]


def seq_of(store, sid: str, kind: str) -> int:
    return next(e["seq"] for e in store.events.read(sid) if e["kind"] == kind)


def cli_verify(store, sid: str, capsys) -> tuple[int, str]:
    code = main(["replay", sid, "--verify", "--db", store.uri])
    out, err = capsys.readouterr()
    return code, out + err


def test_the_untouched_recording_verifies(capsys):
    store, sid = recorded()
    assert cli_verify(store, sid, capsys)[0] == 0


def test_a_filled_cycle_s_cycle_ended_rehashed_as_rejected_diverges(capsys):
    store, sid = recorded()
    rewrite(store, sid, seq_of(store, sid, "cycle_ended"), lambda d: d["payload"].update(status="rejected"))
    assert store.events.verify_chain(sid)["ok"]  # consistent: only the comparison can tell
    report = verify_session(store, sid)
    first = report.first_divergence
    assert not report.ok and (first.state, first.path, first.recorded, first.replayed) == (
        "RUNNER",
        "cycle_ended.status",
        "rejected",
        "completed",
    )
    code, text = cli_verify(store, sid, capsys)
    assert code == 1 and "DIVERGED" in text and "cycle_ended.status" in text


def test_a_status_no_cycle_has_is_unreadable_not_a_crash(capsys):
    store, sid = recorded()
    seq = seq_of(store, sid, "cycle_ended")
    rewrite(store, sid, seq, lambda d: d["payload"].update(status="hacked"))
    code, text = cli_verify(store, sid, capsys)
    assert code == 1 and "Traceback" not in text
    assert (
        f"UNREADABLE event seq {seq} of session '{sid}': bad cycle_ended event: payload.status: Input should be"
        in text.replace("\n", " ").replace("  ", " ")
    )


def test_an_inserted_event_of_an_unknown_kind_is_named(capsys):
    store, sid = recorded()
    seq = append_raw(
        store,
        sid,
        {
            "event_id": "planted",
            "cycle_id": f"{sid}:c1",
            "ts": 1.7e9,
            "state": "RUNNER",
            "kind": "order_override",
            "payload": {"buy": "everything"},
            "schema_version": 1,
            "run_id": None,
            "parent_run_id": None,
        },
    )
    assert store.events.verify_chain(sid)["ok"]
    report = verify_session(store, sid)
    assert not report.ok and len(report.unreadable) == 1
    assert report.unreadable[0].startswith(
        f"event seq {seq} of session '{sid}': unknown event kind 'order_override' "
        f"(this code knows manifest, transition, "
    )
    code, text = cli_verify(store, sid, capsys)
    assert code == 1 and "not verified" in text and "order_override" in text


def test_a_doctored_usage_field_is_named_never_a_raw_value_error(capsys):
    store, sid = recorded()
    seq = seq_of(store, sid, "llm_response")
    rewrite(store, sid, seq, lambda d: d["payload"]["usage"].update(total_tokens="lots"))
    report = verify_session(store, sid)
    assert not report.ok and len(report.unreadable) == 1
    assert report.unreadable[0].startswith(
        f"event seq {seq} of session '{sid}': bad llm_response event: "
        f"payload.usage.total_tokens: Input should be a valid integer"
    )
    code, text = cli_verify(store, sid, capsys)
    assert code == 1 and "ValueError" not in text and "usage.total_tokens" in text
    # the tables (and --json, --html) too: one line naming the event, not the reconstruction's int() error
    assert main(["replay", sid, "--db", store.uri]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid literal" not in err
    assert f"event seq {seq} of session '{sid}': bad llm_response event: payload.usage.total_tokens" in err


def test_replay_flags_a_status_read_from_a_broken_chain(capsys, tmp_path):
    store, sid = recorded()
    seq = seq_of(store, sid, "cycle_ended")
    doc = store.db["state_events"].find_one({"session_id": sid, "seq": seq})
    store.db["state_events"].update_one({"_id": doc["_id"]}, {"$set": {"payload.status": "rejected"}})  # no re-hash
    assert main(["replay", sid, "--db", store.uri]) == 0
    out = capsys.readouterr().out
    assert "status: rejected (hash chain broken: not vouched for)" in " ".join(out.split())
    page = tmp_path / "replay.html"
    assert main(["replay", sid, "--html", str(page), "--db", store.uri]) == 0
    assert "rejected (hash chain broken: not vouched for)" in page.read_text()
