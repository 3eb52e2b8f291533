"""`tradegraph live` in real processes: two loops started at once under the same --name (one refuses with one line
and exit 2, before anything runs: one cycle, no order), a loop SIGKILLed right after it fetched the day's bars
and before its cycle (started again, it reads the file it fetched: no second fetch, one cycle), and a loop stopped
with Ctrl-C while its cycle waits for approval (exit 130, its lease given back, nothing sent)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from database.connection import connect
from database.live_days import LiveDays, LoopLeases
from tests.live.fake_yahoo import FakeYahoo
from tests.live.test_live_restart import fake, loop  # noqa: F401 - fake is a fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def procs():
    """The children a test starts, SIGKILLed at its end whatever happened (none outlives its test)."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


def test_two_loops_under_one_name_one_refuses_with_exit_2_and_only_one_cycle_runs(fake, tmp_path, procs):  # noqa: F811
    # 6h of the children's clock to approve: ~4 minutes of real polling, however slowly the second one starts
    procs += [loop(fake, tmp_path, approve_within="6h"), loop(fake, tmp_path, approve_within="6h")]
    deadline = time.monotonic() + 180
    while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    done = [p for p in procs if p.poll() is not None]
    assert len(done) == 1, "neither loop refused the other"
    refused, other = done[0], next(p for p in procs if p is not done[0])
    out, err = refused.communicate(timeout=30)
    assert refused.returncode == 2, out + err
    assert (
        err.count("\n") == 1
        and f"--name k: the loop (session live-k) is already running: pid {other.pid} on " in err
        and "one process per loop name" in err
    ), err
    assert "running the cycle" not in out
    assert other.stdout is not None
    seen = []
    for line in other.stdout:  # the one holding the lease runs the day as if alone
        seen.append(line)
        if "waits for approval" in line:
            break
    assert any("waits for approval" in s for s in seen), seen
    os.kill(other.pid, signal.SIGKILL)
    other.wait(timeout=30)
    store = connect(fake.db_uri)
    assert store.events.cycle_ids("live-k") == ["live-k:c1"] and fake.orders == []


def test_killed_after_the_fetch_before_the_cycle_reads_that_file_when_restarted(fake, tmp_path, procs):  # noqa: F811
    yahoo = FakeYahoo().start()
    try:
        extra = {"FAKE_YAHOO_PORT": str(yahoo.port), "YF_CACHE": str(tmp_path / "yf-cache")}
        first = loop(fake, tmp_path, prices=False, env_extra={**extra, "DIE_AFTER": "fetched"})
        procs.append(first)
        out, err = first.communicate(timeout=180)
        assert first.returncode == -signal.SIGKILL, out + err
        store = connect(fake.db_uri)
        rec = LiveDays(store.db).get("k|2012-07-02")
        assert rec is not None and rec["state"] == "fetched" and rec["data"]["through"] == "2012-06-29", (rec, out)
        assert [s for s, _ in yahoo.charts] == ["AAPL", "MSFT"] and store.events.cycle_ids("live-k") == []

        again = loop(fake, tmp_path, prices=False, approve_within="5m", env_extra=extra)
        procs.append(again)
        out, err = again.communicate(timeout=180)
        assert again.returncode == 0, out + err
        assert f"2012-07-02: bars through 2012-06-29 fetched before ({rec['data']['file']}); not fetched again" in out
        assert out.count("running the cycle on bars through 2012-06-29") == 1 and "expired at" in out, out
        assert [s for s, _ in yahoo.charts] == ["AAPL", "MSFT"]  # nothing fetched a second time
        assert store.events.cycle_ids("live-k") == ["live-k:c1"] and fake.orders == []
        rec = LiveDays(store.db).get("k|2012-07-02")
        assert rec is not None and rec["state"] == "expired"
        assert yahoo.peers <= {"127.0.0.1"}
    finally:
        yahoo.stop()


def test_ctrl_c_while_the_cycle_waits_for_approval_exits_130_and_gives_the_loop_back(fake, tmp_path, procs):  # noqa: F811
    procs.append(loop(fake, tmp_path, approve_within="6h"))
    p = procs[0]
    assert p.stdout is not None
    seen = []
    for line in p.stdout:
        seen.append(line)
        if "waits for approval" in line:
            break
    assert any("waits for approval" in s for s in seen), seen
    p.send_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, "".join(seen) + out + err
    assert "stopping where the loop next pauses" in out and "stopped; run it again to resume (session live-k)" in out
    assert "Traceback" not in err, err
    store = connect(fake.db_uri)
    token, holder = LoopLeases(store.db).take("k")  # the lease was given back: a restart is not refused
    assert token is not None, holder
    assert [d["state"] for d in LiveDays(store.db).col.find({"loop": "k"})] == ["running"]  # resumed on restart
    assert store.events.cycle_ids("live-k") == ["live-k:c1"] and fake.orders == []
