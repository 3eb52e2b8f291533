"""A log you cannot shorten unnoticed (issue 22, item 1), on the embedded store, with real cycles.

Each test tampers the way an attacker with write access to the store would, through pymongo against the running
server: the last event deleted, the whole last cycle deleted, the tail deleted and the chain head moved back onto
it, log and head rewritten together (with and without TRADEGRAPH_AUDIT_KEY). `tradegraph replay --check-chain`
must exit 1 naming the first missing seq. What is NOT tampering must not read as it: an untouched session, and a
writer SIGKILLed between storing a batch and recording its head (the log one batch ahead of its head). Two writer
processes racing on one session never lower the head.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from database import connect
from database.events import event_hash
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from tests.helpers import services_with

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEY = "0123456789abcdef0123456789abcdef"
DAYS = ("2012-06-01", "2012-06-04", "2012-06-05")


def record(uri: str, key: str | None) -> tuple[str, list[dict]]:
    """Three real cycles of one session (offline model), audited as `run` audits them; and the chain head as it
    stood after each cycle (what someone reading the store then could have kept)."""
    with pytest.MonkeyPatch.context() as mp:
        if key is None:
            mp.delenv("TRADEGRAPH_AUDIT_KEY", raising=False)
        else:
            mp.setenv("TRADEGRAPH_AUDIT_KEY", key)
        store = connect(uri)
        try:
            sid, heads = None, []
            for day in DAYS:
                out = run_state_machine("AAPL,MSFT", day, store=store, session_id=sid, services=services_with())
                assert out.audit_error is None
                sid = out.session_id
                heads.append(store.db["chain_heads"].find_one({"_id": sid}))
            return sid, heads
        finally:
            store.close()


@pytest.fixture(scope="module")
def recorded(embedded_uri):
    """{key or None: (database uri, session id, heads after each cycle)}: one unsigned and one signed recording,
    copied per test."""
    out = {}
    for key in (None, KEY):
        uri = f"{embedded_uri}/heads_src_{uuid.uuid4().hex[:8]}"
        out[key] = (uri, *record(uri, key))
    yield out
    for uri, *_ in out.values():
        s = connect(uri)
        s.client.drop_database(s.db.name)
        s.close()


@pytest.fixture
def copy_of(recorded, embedded_uri):
    """A fresh database holding a copy of a recording (every collection), dropped after the test."""
    made = []

    def make(key=None):
        src_uri, sid, _ = recorded[key]
        src = connect(src_uri)
        dst = connect(f"{embedded_uri}/heads_{uuid.uuid4().hex[:10]}")
        for name in src.db.list_collection_names():
            docs = list(src.db[name].find())
            if docs:
                dst.db[name].insert_many(docs)
        src.close()
        made.append(dst)
        return dst, f"{embedded_uri}/{dst.db.name}", sid

    yield make
    for s in made:
        s.client.drop_database(s.db.name)
        s.close()


def check_chain(uri: str, sid: str, capsys, key: str | None = None) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as mp:
        if key is None:
            mp.delenv("TRADEGRAPH_AUDIT_KEY", raising=False)
        else:
            mp.setenv("TRADEGRAPH_AUDIT_KEY", key)
        code = main(["replay", sid, "--check-chain", "--db", uri])
    out, err = capsys.readouterr()
    return code, out, err


def tg(args: list[str], extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "TRADEGRAPH_AUDIT_KEY")}
    env.update(PYTHONPATH=str(ROOT), **(extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "graph.transports.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def seqs_of(store, sid: str, cycle: int) -> list[int]:
    return [e["seq"] for e in store.events.read(sid, cycle_id=f"{sid}:c{cycle}")]


def move_head(store, sid: str, seq: int) -> None:
    """The head set onto the event at seq, as an attacker without the key would."""
    doc = store.db["state_events"].find_one({"session_id": sid, "seq": seq})
    store.db["chain_heads"].update_one({"_id": sid}, {"$set": {"seq": seq, "hash": doc["hash"]}})


# ---------------------------------------------------------------------------- not tampering
def test_an_untouched_session_is_intact_from_another_process(copy_of):
    store, uri, sid = copy_of()
    n = store.events.count(sid)
    r = tg(["replay", sid, "--check-chain", "--db", uri])
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout == (
        f"hash chain intact: {n} event(s) of session {sid}; the log ends at its chain head, seq {n} (unsigned)\n"
    )
    signed, uri2, sid2 = copy_of(KEY)
    r = tg(["replay", sid2, "--check-chain", "--db", uri2], {"TRADEGRAPH_AUDIT_KEY": KEY})
    assert r.returncode == 0 and "signature verified, key k-" in r.stdout, r.stderr


KILL_BETWEEN_BATCH_AND_HEAD = """
import os, signal, sys
from database import connect
from database.heads import ChainHeads
from graph.machine.runner import run_state_machine
from tests.helpers import services_with
uri, sid, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
real, calls = ChainHeads.advance, []
def advance(self, session_id, seq, hash_):
    calls.append(seq)
    if len(calls) == nth:  # the batch is stored and acknowledged; its head is not recorded yet
        print(seq, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, session_id, seq, hash_)
ChainHeads.advance = advance
run_state_machine("AAPL,MSFT", "2012-06-06", store=connect(uri), session_id=sid, services=services_with())
"""


def test_a_writer_killed_between_its_batch_and_its_head_is_reported_not_failed(copy_of, capsys):
    store, uri, sid = copy_of()
    before = store.events.count(sid)
    proc = subprocess.run(
        [sys.executable, "-c", KILL_BETWEEN_BATCH_AND_HEAD, uri, sid, "2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    stored_at_kill = int(proc.stdout)
    end = store.events.count(sid)
    head = store.events.heads.get(sid)
    assert end == stored_at_kill > head.seq > before  # the second batch stored, the head still after the first
    code, out, err = check_chain(uri, sid, capsys)
    assert (code, err) == (0, ""), err
    assert (
        f"intact: {end} event(s) of session {sid}; {end - head.seq} event(s) after the chain head at seq "
        f"{head.seq} (seq {head.seq + 1}..{end}): what a writer stopped between storing a batch and recording "
        f"its head leaves"
    ) in out
    # the session goes on: the next cycle's first batch moves the head past them
    run_state_machine("AAPL,MSFT", "2012-06-07", store=store, session_id=sid, services=services_with())
    code, out, _ = check_chain(uri, sid, capsys)
    n = store.events.count(sid)
    assert code == 0 and f"the log ends at its chain head, seq {n}" in out


WRITER = """
import sys, time, uuid
from database import connect
from database.heads import ChainHeads
pause, real = float(sys.argv[4]), ChainHeads.advance
def late(self, *args):
    time.sleep(pause)  # a writer stalled between its acknowledged batch and its head update (GC, scheduling)
    return real(self, *args)
if pause:
    ChainHeads.advance = late
s = connect(sys.argv[1])
print("ready", flush=True)
for n in range(int(sys.argv[3])):
    s.events.append([{"event_id": uuid.uuid4().hex, "session_id": sys.argv[2], "cycle_id": sys.argv[2] + ":c1",
                      "ts": time.time(), "state": "RUNNER", "kind": "transition", "payload": {"n": n, "i": i}}
                     for i in range(1 + n % 3)])
"""


def test_two_writer_processes_racing_never_lower_the_head(embedded_uri):
    """One writer stalls 20 ms between each batch and its head update, so the other's higher heads land in
    between, again and again: an unconditional update would move the head back each time (and at the end)."""
    uri = f"{embedded_uri}/heads_race_{uuid.uuid4().hex[:8]}"
    store = connect(uri)
    seen: list[int] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            head = store.events.heads.get("R")
            if head is not None:
                seen.append(head.seq)

    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, uri, "R", "150", pause],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            for pause in ("0", "0.02")
        ]
        for p in procs:
            assert p.stdout.readline().strip() == b"ready"
        watcher = threading.Thread(target=watch)
        watcher.start()
        for p in procs:
            assert p.wait(timeout=300) == 0
        stop.set()
        watcher.join()
        n = store.events.count("R")
        assert n == 2 * sum(1 + k % 3 for k in range(150))
        lowered = [(a, b) for a, b in zip(seen, seen[1:]) if b < a]
        assert len(seen) > 50 and not lowered, lowered[:5]
        assert store.events.heads.get("R").seq == n and store.events.verify_chain("R")["ok"]
    finally:
        stop.set()
        store.client.drop_database(store.db.name)
        store.close()


# ---------------------------------------------------------------------------- tampering
def test_the_last_event_deleted_is_named_from_another_process(copy_of):
    store, uri, sid = copy_of()
    n = store.events.count(sid)
    store.db["state_events"].delete_one({"session_id": sid, "seq": n})
    r = tg(["replay", sid, "--check-chain", "--db", uri])
    assert (
        r.returncode == 1
        and r.stdout == ""
        and r.stderr
        == (
            f"tradegraph: error: hash chain of session {sid} broken at seq {n}: the log ends at seq {n - 1}, but its "
            f"chain head records seq {n}: seq {n} missing (the log was cut short)\n"
        )
    )


def test_every_event_of_the_last_cycle_deleted_is_named_by_its_first_seq(copy_of, capsys, tradegraph):
    store, uri, sid = copy_of()
    first, n = seqs_of(store, sid, 3)[0], store.events.count(sid)
    store.db["state_events"].delete_many({"session_id": sid, "cycle_id": f"{sid}:c3"})
    code, out, err = check_chain(uri, sid, capsys)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert f"broken at seq {first}: the log ends at seq {first - 1}, but its chain head records seq {n}" in err
    # --verify refuses to vouch for it too
    r = tradegraph("replay", sid, "--verify", "--db", uri)
    assert r.returncode == 1 and f"hash chain broken at seq {first}" in r.stdout and "not verified" in r.stdout


def test_the_tail_deleted_and_the_head_rolled_back_is_betrayed_outside_the_log(copy_of, capsys):
    """No key: the attacker deletes the last cycle and moves the head onto the shorter log. The cycle counter
    still says three cycles were allocated; the execution ledger that the third one filled."""
    store, uri, sid = copy_of()
    first = seqs_of(store, sid, 3)[0]
    store.db["state_events"].delete_many({"session_id": sid, "seq": {"$gte": first}})
    move_head(store, sid, first - 1)
    code, _, err = check_chain(uri, sid, capsys)
    ledger = store.db["executions"].count_documents({"cycle_id": {"$regex": f"^{sid}:c3"}})
    if ledger:  # the third cycle filled (or closed a position): the ledger says so, and a fill follows its events
        assert code == 1 and f"broken at seq {first}: cycle {sid}:c3 has an execution-ledger entry" in err
        store.db["executions"].delete_many({"cycle_id": {"$regex": f"^{sid}:c3"}})
        code, _, err = check_chain(uri, sid, capsys)
    assert code == 1 and f"broken at seq {first}: cycle {sid}:c3 was allocated (the cycle counter is at 3)" in err
    # log, head, counter and ledger rewritten together: what no check inside the store can see (README)
    store.db["counters"].update_one({"_id": f"{sid}#cycles"}, {"$set": {"n": 2}})
    assert check_chain(uri, sid, capsys)[0] == 0


def test_a_deleted_tail_inside_the_last_cycle_with_the_head_rolled_back_passes_without_a_key(copy_of, capsys):
    """The documented limit without a key: a consistent rewrite of log and head inside the last cycle."""
    store, uri, sid = copy_of()
    n = store.events.count(sid)
    store.db["state_events"].delete_many({"session_id": sid, "seq": {"$gt": n - 20}})
    move_head(store, sid, n - 20)
    assert check_chain(uri, sid, capsys)[0] == 0


def test_with_a_key_log_and_head_rewritten_together_are_caught(copy_of, capsys):
    store, uri, sid = copy_of(KEY)
    n = store.events.count(sid)
    # the tail of the last cycle deleted and the head moved onto it: its signature no longer verifies
    store.db["state_events"].delete_many({"session_id": sid, "seq": {"$gt": n - 20}})
    move_head(store, sid, n - 20)
    code, _, err = check_chain(uri, sid, capsys, key=KEY)
    assert code == 1 and f"broken at seq {n - 20}: the chain head's signature does not verify" in err
    # checked without the key, the same rewrite passes: the head is signed, the reader is told to set the key
    code, out, _ = check_chain(uri, sid, capsys)
    assert code == 0 and "set TRADEGRAPH_AUDIT_KEY to check the signature" in out


def test_with_a_key_an_edited_event_rehashed_to_the_end_is_caught(copy_of, capsys):
    store, uri, sid = copy_of(KEY)
    events = store.events.read(sid)
    prev = events[9]["hash"]
    for doc in events[10:]:  # seq 11 edited, every later event re-chained, the head's hash set to the new end
        doc["prev_hash"] = prev
        if doc["seq"] == 11:
            doc["payload"]["edited"] = True
        doc["hash"] = prev = event_hash(doc)
        store.db["state_events"].replace_one({"session_id": sid, "seq": doc["seq"]}, doc)
    store.db["chain_heads"].update_one({"_id": sid}, {"$set": {"hash": prev}})
    code, _, err = check_chain(uri, sid, capsys, key=KEY)
    assert code == 1 and f"broken at seq {len(events)}: the chain head's signature does not verify" in err
    # without a key the rewrite is consistent, so it passes: what the README says
    assert check_chain(uri, sid, capsys)[0] == 0


def test_with_a_key_a_restored_signed_head_with_a_matching_log_passes_as_documented(recorded, copy_of, capsys):
    """The limit a key leaves: the signed head captured after cycle 2 restored, with the log cut back to it.
    The counter (and the ledger) betray a whole missing cycle; rolled back too, nothing in the store does: only a head
    notarised outside it (`tradegraph export head`) shows the log had grown past it."""
    store, uri, sid = copy_of(KEY)
    captured = recorded[KEY][2][1]
    notarised = tg(["export", "head", sid, "--db", uri], {"TRADEGRAPH_AUDIT_KEY": KEY})
    assert notarised.returncode == 0 and f'"seq": {store.events.count(sid)},' in notarised.stdout
    store.db["state_events"].delete_many({"session_id": sid, "seq": {"$gt": captured["seq"]}})
    store.db["chain_heads"].replace_one({"_id": sid}, captured)
    code, _, err = check_chain(uri, sid, capsys, key=KEY)
    # the ledger (if cycle 3 filled) or the cycle counter
    assert code == 1 and f"broken at seq {captured['seq'] + 1}: cycle {sid}:c3 " in err
    store.db["counters"].update_one({"_id": f"{sid}#cycles"}, {"$set": {"n": 2}})
    store.db["executions"].delete_many({"cycle_id": {"$regex": f"^{sid}:c3"}})
    assert check_chain(uri, sid, capsys, key=KEY)[0] == 0


def test_the_whole_log_deleted_is_named_by_its_head(copy_of, capsys):
    store, uri, sid = copy_of()
    n = store.events.count(sid)
    store.db["state_events"].delete_many({"session_id": sid})
    code, _, err = check_chain(uri, sid, capsys)
    assert code == 1 and f"broken at seq 1: the log ends at seq 0, but its chain head records seq {n}" in err


def test_export_head_prints_the_signed_head_and_refuses_a_forged_one(copy_of, capsys):
    import hashlib
    import hmac
    import json

    store, uri, sid = copy_of(KEY)
    r = tg(["export", "head", sid, "--db", uri], {"TRADEGRAPH_AUDIT_KEY": KEY})
    assert r.returncode == 0, r.stderr
    head = json.loads(r.stdout)
    assert head["seq"] == store.events.count(sid) and head["alg"] == "HMAC-SHA256"
    # anyone holding the key checks it from the printed bytes alone
    assert hmac.new(KEY.encode(), head["signed"].encode(), hashlib.sha256).hexdigest() == head["sig"]
    assert json.loads(head["signed"])["hash"] == head["hash"] == store.events.read(sid)[-1]["hash"]
    move_head(store, sid, 5)
    r = tg(["export", "head", sid, "--db", uri], {"TRADEGRAPH_AUDIT_KEY": KEY})
    assert r.returncode == 1 and r.stdout == "" and "signature does not verify" in r.stderr
    r = tg(["export", "head", "nope", "--db", uri])
    assert r.returncode == 2 and "unknown session 'nope'" in r.stderr


# ---------------------------------------------------------------------------- a keyed session without its head (issue 28)
def test_with_a_key_an_event_rewritten_rehashed_and_its_head_deleted_never_verifies(copy_of, capsys, tradegraph):
    """The attack issue 28 found: edit any event, re-hash to the end, delete the session's chain head. It read as a
    note and exit 0 (`--verify`: "replay identical"); the session's manifests say its heads are signed, so it is
    broken, with the key set and without it."""
    store, uri, sid = copy_of(KEY)
    events = store.events.read(sid)
    prev = events[9]["hash"]
    for doc in events[10:]:
        doc["prev_hash"] = prev
        if doc["seq"] == 11:
            doc["payload"]["edited"] = True
        doc["hash"] = prev = event_hash(doc)
        store.db["state_events"].replace_one({"session_id": sid, "seq": doc["seq"]}, doc)
    store.db["chain_heads"].delete_one({"_id": sid})
    for key in (KEY, None):
        code, out, err = check_chain(uri, sid, capsys, key=key)
        assert code == 1 and out == "" and err.count("\n") == 1, (out, err)
        assert (
            f"hash chain of session {sid} broken at seq 1: the session was written under TRADEGRAPH_AUDIT_KEY "
            f"(its manifest at seq "
        ) in err and "but it has no chain head: the head was deleted" in err
    for extra in ({"TRADEGRAPH_AUDIT_KEY": KEY}, {}):
        r = tradegraph("replay", sid, "--verify", "--db", uri, **extra)
        assert r.returncode == 1 and "hash chain broken at seq 1" in r.stdout and "not verified" in r.stdout, r.stdout


def test_with_a_key_the_last_cycle_cut_with_counter_ledger_and_head_never_verifies(copy_of, capsys):
    store, uri, sid = copy_of(KEY)
    store.db["state_events"].delete_many({"session_id": sid, "cycle_id": f"{sid}:c3"})
    store.db["counters"].update_one({"_id": f"{sid}#cycles"}, {"$set": {"n": 2}})
    store.db["executions"].delete_many({"cycle_id": {"$regex": f"^{sid}:c3"}})
    store.db["chain_heads"].delete_one({"_id": sid})
    for key in (KEY, None):
        code, _, err = check_chain(uri, sid, capsys, key=key)
        assert code == 1 and "broken at seq 1: the session was written under TRADEGRAPH_AUDIT_KEY" in err, err
