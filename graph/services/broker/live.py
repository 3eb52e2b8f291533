"""`tradegraph live`: one broker cycle per trading day at a New York time, paused for approval until a deadline,
reconciled after that day's close. The loop owns nothing but its schedule and the day records
(database/live_days.py); a cycle, an approval and a reconcile go through the caller's `Actions` (the kernel's
capabilities in the CLI), and time through `now` and `sleep`, so tests drive days with a fake clock.

A day's cycle decides on the last complete bar (the previous session's, as the market's rules say of a decision
taken before the close) and its orders go to the broker on the day itself."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Optional, Protocol

import pandas as pd

from agent.markets import is_trading_day, nearest_trading_days, session_close
from database.live_days import FINAL, LiveDays

MARKET = "us_equity"
NY = "America/New_York"
ORDERS_SENT = ("completed", "executed_with_errors", "failed", "degraded", "cut_off")
POLL_S = 5.0  # how often a pending approval is looked at


class Actions(Protocol):
    session_id: str

    def cycles(self) -> int: ...
    def run(self, as_of: str) -> tuple[str, str]: ...
    def status(self, cycle_id: str) -> Optional[str]: ...
    def reject(self, by: str) -> Optional[str]: ...  # why it was refused, None when recorded
    def reconcile(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Plan:
    loop: str            # the loop's name: its session and day records
    at: timedelta        # New York time of day the cycle runs
    approve_within: timedelta
    days: Optional[int] = None  # stop after this many trading days (None: run until stopped)


def run_time(day: pd.Timestamp, at: timedelta) -> datetime:
    return (day + at).tz_localize(NY).tz_convert("UTC").to_pydatetime()


def close_time(day: pd.Timestamp) -> datetime:
    return session_close(MARKET, day).tz_localize("UTC").to_pydatetime()


def next_day(plan: Plan, now: datetime, days: LiveDays) -> pd.Timestamp:
    """A day this loop started and has not finished, else today while its session is still open (and not handled
    by an earlier run), else the next trading day."""
    left = days.unfinished(plan.loop)
    if left:
        return pd.Timestamp(left[0]["day"])
    today = _today(now)
    if is_trading_day(MARKET, today) and now < close_time(today) and \
            days.get(days.key(plan.loop, str(today.date()))) is None:
        return today
    nxt = nearest_trading_days(MARKET, today)[1]
    assert nxt is not None, f"{today.date()} is at the end of the market calendar"
    return nxt


def live(plan: Plan, days: LiveDays, actions: Actions, *, now: Callable[[], datetime],
         sleep: Callable[[float], None], say: Callable[[str], None]) -> int:
    """Runs days until `plan.days` were handled (forever when None); returns how many were."""
    handled = 0
    today = _today(now())
    earlier = days.get(days.key(plan.loop, str(today.date())))
    if earlier is not None and earlier["state"] in FINAL:
        say(f"{today.date()}: already {earlier['state']} by an earlier run; not run again")
    while plan.days is None or handled < plan.days:
        day = next_day(plan, now(), days)
        rec = days.get(days.key(plan.loop, str(day.date())))
        if rec is not None and rec["state"] in FINAL:  # done by an earlier run: the next one
            say(f"{day.date()}: already {rec['state']}")
            handled += 1
            continue
        if rec is None:
            at = run_time(day, plan.at)
            if at >= close_time(day):  # an early close before the run time: no cycle that day
                key = days.claim(plan.loop, str(day.date()), actions.session_id)["_id"]
                days.advance(key, "claimed", "skipped", why=f"the session closes at {_ny(close_time(day))}")
                say(f"{day.date()}: skipped, the session closes at {_ny(close_time(day))} before the run time")
                handled += 1
                continue
            _wait_until(at, now, sleep, say, f"{day.date()}: next run at {_ny(at)}")
        run_day(plan, day, days, actions, now=now, sleep=sleep, say=say)
        handled += 1
    return handled


def run_day(plan: Plan, day: pd.Timestamp, days: LiveDays, actions: Actions, *, now: Callable[[], datetime],
            sleep: Callable[[float], None], say: Callable[[str], None]) -> dict[str, Any]:
    d = str(day.date())
    rec = days.claim(plan.loop, d, actions.session_id)
    key = rec["_id"]
    if rec["state"] == "claimed":
        before = actions.cycles()
        if days.advance(key, "claimed", "running", cycle_id=f"{actions.session_id}:c{before + 1}"):
            as_of = str(nearest_trading_days(MARKET, day)[0].date())  # type: ignore[union-attr]
            say(f"{d}: running the cycle on bars through {as_of}")
            actions.run(as_of)
        rec = days.get(key) or rec
    if rec["state"] == "running":
        rec = _decide(plan, rec, days, actions, now=now, sleep=sleep, say=say)
    if rec["state"] == "decided":
        if rec["status"] in ORDERS_SENT:
            _wait_until(close_time(day) + timedelta(minutes=1), now, sleep, say,
                        f"{d}: reconcile after the close at {_ny(close_time(day))}")
            report = actions.reconcile()
            days.advance(key, "decided", "done", reconcile={"clean": report.get("clean"),
                                                            "drift": report.get("drift")})
            say(f"{d}: reconciled, {'clean' if report.get('clean') else 'DRIFT: ' + str(report.get('drift'))}")
        else:
            days.advance(key, "decided", "done")
            say(f"{d}: done ({rec['status']}, no order sent)")
    return days.get(key) or rec


def _decide(plan: Plan, rec: dict[str, Any], days: LiveDays, actions: Actions, *, now: Callable[[], datetime],
            sleep: Callable[[float], None], say: Callable[[str], None]) -> dict[str, Any]:
    """The day's cycle until it is decided: waits for an approval until the deadline, then rejects it as expired
    through the same approval gate (so a person approving at the same moment and the deadline decide it once)."""
    key, cycle_id, d = rec["_id"], rec["cycle_id"], rec["day"]
    status = actions.status(cycle_id)
    if status is None:  # killed after claiming the day but before the cycle began: nothing ran, so run it now
        as_of = str(nearest_trading_days(MARKET, pd.Timestamp(d))[0].date())  # type: ignore[union-attr]
        say(f"{d}: running the cycle on bars through {as_of} (resumed)")
        actions.run(as_of)
        status = actions.status(cycle_id)
    if status == "pending_approval":
        deadline = rec.get("deadline")
        if deadline is None:
            deadline = (now() + plan.approve_within).timestamp()
            days.note(key, deadline=deadline)
        until = datetime.fromtimestamp(deadline, UTC)
        say(f"{d}: cycle {cycle_id} waits for approval until {_ny(until)}: tradegraph approve {actions.session_id}")
        while status in ("pending_approval", "deciding") and now() < until:
            sleep(min(POLL_S, max((until - now()).total_seconds(), 0.0)))
            status = actions.status(cycle_id)
        if status == "pending_approval":
            refused = actions.reject(f"tradegraph live: approval deadline {_ny(until)} passed")
            if refused:  # decided by someone else at the last moment: their decision stands
                say(f"{d}: expiry not recorded ({refused}); reading the decision taken")
            status = actions.status(cycle_id)
            if status == "rejected" and days.advance(key, "running", "expired", status="expired",
                                                     deadline=deadline):
                say(f"{d}: expired at {_ny(until)} with no approval; no order sent")
                return days.get(key) or rec
    while status == "deciding":  # an approver is deciding it right now: its decision is the day's
        sleep(POLL_S)
        status = actions.status(cycle_id)
    if status == "cut_off":  # the process running it died before it paused: never rerun, the day is over
        days.advance(key, "running", "cut_off", status=status)
        say(f"{d}: the cycle {cycle_id} was cut off before it paused; the day is not run again")
        return days.get(key) or rec
    days.advance(key, "running", "decided", status=status)
    say(f"{d}: cycle {cycle_id} {status}")
    return days.get(key) or rec


def _wait_until(at: datetime, now: Callable[[], datetime], sleep: Callable[[float], None],
                say: Callable[[str], None], line: str) -> None:
    left = (at - now()).total_seconds()
    if left <= 0:
        return
    say(f"{line} (in {timedelta(seconds=int(left))})")
    while left > 0:
        sleep(min(left, 3600.0))  # wakes at least hourly: a clock that jumped (suspend) is noticed
        left = (at - now()).total_seconds()


def _today(now: datetime) -> pd.Timestamp:
    return pd.Timestamp(now.astimezone(UTC)).tz_convert(NY).tz_localize(None).normalize()


def _ny(t: datetime) -> str:
    return pd.Timestamp(t).tz_convert(NY).strftime("%Y-%m-%d %H:%M %Z")
