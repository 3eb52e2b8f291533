"""`tradegraph live` driven in process by a fake clock, through the real kernel (run_cycle, approve, reconcile) on
mongomock against the fake Alpaca: the approval deadline expires a day with no order; a holiday is skipped; an
early close moves the reconcile to 13:00; a day already done is not run again."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Optional

import pytest

from agent.data.sources import KINDS
from database.connection import connect
from database.live_days import LiveDays
from graph.machine.recording import load_session_log
from graph.transports.cli.live import KernelActions, cmd_live
from graph.transports.cli.main import build_parser, main
from tests.brokers.harness import guard_loopback, start_fake
from tests.fakes.fake_alpaca import KEY, SECRET
from tests.signals import (  # noqa: F401 - default_ctrl_c is a fixture
    ctrl_c,
    default_ctrl_c,
    interrupting,
    join_foreground,
    stuck_under_two,
)


class Clock:
    """Now, moved on only by the loop's sleeps; `on_sleep` lets a test act (approve) while the loop waits."""

    def __init__(self, start: datetime) -> None:
        self.t = start
        self.slept: list[tuple[datetime, float]] = []
        self.on_sleep: Optional[Callable[[Clock], None]] = None

    def now(self) -> datetime:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append((self.t, s))
        self.t += timedelta(seconds=s)
        if self.on_sleep:
            self.on_sleep(self)


@pytest.fixture
def env(tmp_path, monkeypatch):
    seen = guard_loopback(monkeypatch)
    fake: Any = start_fake()
    fake.positions.clear()
    mandate = tmp_path / "mandate.toml"
    mandate.write_text(
        'trading_hours = "00:00-23:59"\nmax_order_notional = 1e9\nmax_position_notional = 1e9\n'
        "max_gross_exposure = 1e9\n"
    )
    for k, v in {
        "ALPACA_API_KEY": KEY,
        "ALPACA_SECRET_KEY": SECRET,
        "ALPACA_BASE_URL": fake.url,
        "TRADEGRAPH_MANDATE": str(mandate),
        "TRADEGRAPH_BROKER_FILL_WAIT_S": "0.3",
        "TRADEGRAPH_HOME": str(tmp_path),
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MONGODB_URI", raising=False)
    fake.db = f"mongomock://localhost/live_{uuid.uuid4().hex[:8]}"
    yield fake
    fake.stop()
    assert all(a[0] in ("127.0.0.1", "::1", "localhost") for a in seen if isinstance(a, tuple))


def ny(day: str, hm: str) -> datetime:
    import pandas as pd

    return pd.Timestamp(f"{day} {hm}").tz_localize("America/New_York").tz_convert("UTC").to_pydatetime()


def live(fake, clock: Clock, *extra: str, prices: bool = True) -> int:
    """The loop on the bundled sample named with --prices (so it fetches nothing), unless `prices` is False."""
    files = ["--prices", str(KINDS["prices"].bundled)] if prices else []
    args = build_parser().parse_args(
        ["live", "--broker", "alpaca", "--symbols", "AAPL,MSFT", "--db", fake.db, "--name", "t", *files, *extra]
    )
    return cmd_live(args, now=clock.now, sleep=clock.sleep)


def records(fake) -> dict[str, dict]:
    store = connect(fake.db)
    return {d["day"]: d for d in LiveDays(store.db).col.find({"loop": "t"})}


def test_deadline_expires_the_day_with_no_order_and_the_next_trading_day_after_the_holiday(env, capsys):
    clock = Clock(ny("2012-07-03", "08:00"))  # 07-03 closes at 13:00; 07-04 is Independence Day
    assert live(env, clock, "--approve-within", "30m", "--days", "2") == 0
    out = capsys.readouterr().out
    recs = records(env)
    assert sorted(recs) == ["2012-07-03", "2012-07-05"]  # the holiday has no record and no cycle
    assert [r["state"] for r in recs.values()] == ["expired", "expired"], (
        out,
        [r.get("status") for r in recs.values()],
    )
    # --prices named a file: read as it is, nothing fetched, no fetch audited
    assert all("data" not in r and "fetch_deadline" not in r for r in recs.values()) and "fetched" not in out
    assert connect(env.db).events.cycle_ids("livedata-t") == []
    assert env.orders == [] and env.posts == {}
    assert "next run at 2012-07-03 09:35 EDT" in out and "expired at 2012-07-03 10:05 EDT" in out
    assert "next run at 2012-07-05 09:35 EDT" in out
    # the expiry is the gate's own rejection, read as the session's fold reads an approval (whatever event holds it)
    rejections = [c.approval for c in load_session_log(connect(env.db), "live-t").cycles]
    assert len(rejections) == 2 and all(
        r and r["approved"] is False and "approval deadline" in r["by"] for r in rejections
    ), rejections


def test_approved_day_reconciles_at_the_early_close_and_is_not_run_again(env, capsys):
    clock = Clock(ny("2012-07-03", "09:00"))

    def approve_when_pending(c: Clock) -> None:
        if any(r["state"] == "running" and r.get("deadline") for r in records(env).values()) and not env.orders:
            assert main(["approve", "live-t", "--by", "alice", "--db", env.db]) in (0, 4)

    clock.on_sleep = approve_when_pending
    assert live(env, clock, "--approve-within", "30m", "--days", "1") == 0
    rec = records(env)["2012-07-03"]
    assert rec["state"] == "done" and rec["status"] == "completed" and rec["reconcile"]["clean"] is True, rec
    n_orders = len(env.orders)
    cids = {o["client_order_id"] for o in env.orders}
    assert n_orders >= 1 and len(cids) == n_orders  # one order per leg
    # the reconcile waited for the early close (13:00 New York), not the regular 16:00
    waits = [t + timedelta(seconds=s) for t, s in clock.slept]
    assert ny("2012-07-03", "13:01") in waits and max(waits) < ny("2012-07-03", "16:00")
    capsys.readouterr()
    # started again on the same day: 07-03 is done and not run again; the next run is 07-05's (which expires)
    cycles = len(connect(env.db).events.cycle_ids("live-t"))
    again = Clock(ny("2012-07-03", "09:00"))
    assert live(env, again, "--days", "1") == 0
    out = capsys.readouterr().out
    assert "2012-07-03: already done" in out and "next run at 2012-07-05 09:35 EDT" in out
    assert "2012-07-03: running" not in out
    assert len(env.orders) == n_orders and len(connect(env.db).events.cycle_ids("live-t")) == cycles + 1


@pytest.mark.parametrize(
    "flag,value", [("--at", "25:00"), ("--approve-within", "soon"), ("--name", "a b"), ("--fetch-within", "0m")]
)
def test_bad_flags_are_one_line_and_exit_2(env, capsys, flag, value):
    assert main(["live", "--broker", "alpaca", "--symbols", "AAPL", "--db", env.db, flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and value in err


def test_ctrl_c_while_waiting_stops_with_a_line_and_130(env, capsys):
    clock = Clock(ny("2012-07-03", "08:00"))

    def interrupt(s: float) -> None:
        raise KeyboardInterrupt

    args = build_parser().parse_args(["live", "--broker", "alpaca", "--symbols", "AAPL", "--db", env.db, "--name", "t"])
    assert cmd_live(args, now=clock.now, sleep=interrupt) == 130
    out = capsys.readouterr().out
    assert "next run at 2012-07-03 09:35 EDT" in out and "stopped; run it again to resume" in out


def test_a_ctrl_c_inside_a_store_call_lets_the_call_end_and_stops_the_loop_at_its_next_pause(
    env, capsys, monkeypatch, default_ctrl_c
):
    """A real SIGINT while the loop is inside a store call (polling its cycle's approval): the call runs to its end
    with its lock released, and the loop stops where it next pauses; nothing after runs. On the main thread the
    interrupt was raised inside the call, which pymongo can leave with a pool lock held for ever."""
    clock = Clock(ny("2012-07-03", "08:00"))
    polling, lock, finished = interrupting(KernelActions.status)
    monkeypatch.setattr(KernelActions, "status", polling)
    assert live(env, clock, "--approve-within", "30m", "--days", "2") == 130
    out = capsys.readouterr().out
    assert finished.is_set(), "the Ctrl-C cut the store call"
    assert lock.acquire(timeout=1), "the store call's lock was left held"
    lock.release()
    assert "stopping where the loop next pauses" in out and "stopped; run it again to resume (session live-t)" in out
    after = out.split("stopping where the loop next pauses")[1]
    assert "expired" not in after and "next run" not in after, out  # it paused once more, and stopped there
    assert [r["state"] for r in records(env).values()] == ["running"], records(env)  # the day resumes on restart
    assert env.orders == []


def test_a_second_ctrl_c_closes_the_store_under_a_stuck_loop_and_exits_130(env, capsys, monkeypatch, default_ctrl_c):
    clock = Clock(ny("2012-07-03", "08:00"))
    release, closed = stuck_under_two(monkeypatch, KernelActions, "status")
    try:
        assert live(env, clock, "--days", "1") == 130
        # closed by the second Ctrl-C, under the call still hanging (not by the loop's own exit once it was cut)
        assert closed == [(threading.main_thread(), True)], closed
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a third could only break the close half-way
        assert "stopped; run it again to resume" in capsys.readouterr().out
    finally:
        release.set()
        join_foreground()


def test_a_ctrl_c_while_the_loop_starts_on_a_day_already_due_runs_no_cycle(env, capsys, monkeypatch, default_ctrl_c):
    clock = Clock(ny("2012-07-03", "10:00"))  # after --at 09:35: the day is due at once, with no pause before it
    opened = KernelActions.open_session

    def open_session(self):
        ctrl_c()  # while the command starts, its store just opened: no cycle under way yet
        time.sleep(0.3)
        return opened(self)

    monkeypatch.setattr(KernelActions, "open_session", open_session)
    try:
        assert live(env, clock, "--approve-within", "30m", "--days", "1") == 130
    finally:
        join_foreground()
    out = capsys.readouterr().out
    assert "stopped; run it again to resume" in out and "running the cycle" not in out, out
    assert connect(env.db).events.cycle_ids("live-t") == [] and records(env) == {}


def test_an_approve_stopped_before_its_resume_leaves_the_cycle_paused_for_the_loop(env, capsys):
    """`tradegraph approve` whose Ctrl-C came while it checked the approval (its stop asked before the resume):
    nothing is recorded, its claim is released, and the loop polling the cycle still sees it waiting; the deadline
    then expires it as any unanswered day (before: the cycle read `failed` while its checkpoint still waited, the
    loop closed the day, and a later approval would have sent orders for a closed day)."""
    from graph.machine import interrupts
    from graph.transports.cli.common import kernel

    clock = Clock(ny("2012-07-03", "09:00"))
    tried: list[str] = []

    def interrupted_approve(c: Clock) -> None:
        if tried or not any(r["state"] == "running" and r.get("deadline") for r in records(env).values()):
            return
        asked = threading.Event()
        asked.set()
        with interrupts.stoppable(asked), kernel(env.db) as k:
            with pytest.raises(KeyboardInterrupt) as stopped:
                k.call("approve", {"session_id": "live-t", "approved": True, "by": "alice"}, transport="cli")
        tried.append(str(stopped.value))

    clock.on_sleep = interrupted_approve
    assert live(env, clock, "--approve-within", "30m", "--days", "1") == 0
    assert tried == ["stopped by Ctrl-C before EXECUTING in cycle live-t:c1"]
    rec = records(env)["2012-07-03"]
    assert rec["state"] == "expired", rec  # still waiting after the interrupted approval, then past its deadline
    store = connect(env.db)
    assert store.events.read("live-t", kind="error") == []  # the interrupted approval recorded nothing
    assert env.orders == []
