"""`tradegraph live`: one broker cycle per trading day at a New York time, paused for approval until a deadline,
reconciled after that day's close. The loop owns nothing but its schedule and the day records
(database/live_days.py); a cycle, an approval and a reconcile go through the caller's `Actions` (the kernel's
capabilities in the CLI), and time through `now` and `sleep`, so tests drive days with a fake clock.

A day's cycle decides on the last complete bar (the previous session's, as the market's rules say of a decision
taken before the close) and its orders go to the broker on the day itself. Unless the user named a price file, the
loop fetches those bars itself before each day's cycle (graph/services/broker/live_data.py): retried while the
source fails or lags, until a deadline after which the day is skipped with no cycle; the fetch is recorded on the
day (`fetched`, its file and hash), so a restart reads that file instead of fetching again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Optional, Protocol

import pandas as pd

from agent.markets import is_trading_day, nearest_trading_days, session_close
from database.live_days import FINAL, LiveDays
from graph.services.broker.live_data import RETRY_S, Fetch, NotFresh, fetch_once, files_of, intact

MARKET = "us_equity"
NY = "America/New_York"
ORDERS_SENT = ("completed", "executed_with_errors", "failed", "degraded", "cut_off")
POLL_S = 5.0  # how often a pending approval is looked at


class Actions(Protocol):
    session_id: str

    def cycles(self) -> int: ...
    def run(self, as_of: str, files: dict[str, str]) -> tuple[str, str]: ...  # files: the day's own, over the loop's
    def status(self, cycle_id: str) -> Optional[str]: ...
    def reject(self, by: str) -> Optional[str]: ...  # why it was refused, None when recorded
    def reconcile(self) -> dict[str, Any]: ...
    def audit_fetch(self, record: dict[str, Any]) -> None: ...  # one fetch or its refusal, as an audited event


class LoopTakenOver(RuntimeError):
    """This loop's lease was taken by another process (it found this one dead): this one must not trade on."""


@dataclass(frozen=True)
class Plan:
    loop: str  # the loop's name: its session and day records
    at: timedelta  # New York time of day the cycle runs
    approve_within: timedelta
    days: Optional[int] = None  # stop after this many trading days (None: run until stopped)
    fetch: Optional[Fetch] = None  # the day's bars fetched before its cycle (None: the user's files as they are)


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
    if (
        is_trading_day(MARKET, today)
        and now < close_time(today)
        and days.get(days.key(plan.loop, str(today.date()))) is None
    ):
        return today
    nxt = nearest_trading_days(MARKET, today)[1]
    assert nxt is not None, f"{today.date()} is at the end of the market calendar"
    return nxt


def live(
    plan: Plan,
    days: LiveDays,
    actions: Actions,
    *,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    say: Callable[[str], None],
    held: Callable[[], bool] = lambda: True,
) -> int:
    """Runs days until `plan.days` were handled (forever when None); returns how many were. `held`: whether this
    process still holds the loop's lease, asked before anything is fetched, run or reconciled."""
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
        run_day(plan, day, days, actions, now=now, sleep=sleep, say=say, held=held)
        handled += 1
    return handled


def run_day(
    plan: Plan,
    day: pd.Timestamp,
    days: LiveDays,
    actions: Actions,
    *,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    say: Callable[[str], None],
    held: Callable[[], bool] = lambda: True,
) -> dict[str, Any]:
    d = str(day.date())
    _check(held)
    rec = days.claim(plan.loop, d, actions.session_id)
    key = rec["_id"]
    as_of = str(nearest_trading_days(MARKET, day)[0].date())  # type: ignore[union-attr]
    if plan.fetch is not None and rec["state"] in ("claimed", "fetched"):
        rec = _fresh_bars(plan.fetch, rec, as_of, days, actions, now=now, sleep=sleep, say=say, held=held)
        if rec["state"] == "skipped":
            return rec
    if rec["state"] in ("claimed", "fetched"):
        before = actions.cycles()
        _check(held)
        if days.advance(key, rec["state"], "running", cycle_id=f"{actions.session_id}:c{before + 1}"):
            say(f"{d}: running the cycle on bars through {as_of}")
            actions.run(as_of, rec.get("files") or {})
        rec = days.get(key) or rec
    if rec["state"] == "running":
        rec = _decide(plan, rec, days, actions, now=now, sleep=sleep, say=say)
    if rec["state"] == "decided":
        if rec["status"] in ORDERS_SENT:
            _wait_until(
                close_time(day) + timedelta(minutes=1),
                now,
                sleep,
                say,
                f"{d}: reconcile after the close at {_ny(close_time(day))}",
            )
            _check(held)
            report = actions.reconcile()
            days.advance(key, "decided", "done", reconcile={"clean": report.get("clean"), "drift": report.get("drift")})
            say(f"{d}: reconciled, {'clean' if report.get('clean') else 'DRIFT: ' + str(report.get('drift'))}")
        else:
            days.advance(key, "decided", "done")
            say(f"{d}: done ({rec['status']}, no order sent)")
    return days.get(key) or rec


def _decide(
    plan: Plan,
    rec: dict[str, Any],
    days: LiveDays,
    actions: Actions,
    *,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The day's cycle until it is decided: waits for an approval until the deadline, then rejects it as expired
    through the same approval gate (so a person approving at the same moment and the deadline decide it once)."""
    key, cycle_id, d = rec["_id"], rec["cycle_id"], rec["day"]
    status = actions.status(cycle_id)
    if status is None:  # killed after claiming the day but before the cycle began: nothing ran, so run it now
        as_of = str(nearest_trading_days(MARKET, pd.Timestamp(d))[0].date())  # type: ignore[union-attr]
        say(f"{d}: running the cycle on bars through {as_of} (resumed)")
        actions.run(as_of, rec.get("files") or {})
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
            if status == "rejected" and days.advance(key, "running", "expired", status="expired", deadline=deadline):
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


def _fresh_bars(
    fetch: Fetch,
    rec: dict[str, Any],
    as_of: str,
    days: LiveDays,
    actions: Actions,
    *,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    say: Callable[[str], None],
    held: Callable[[], bool],
) -> dict[str, Any]:
    """The day's bars through `as_of`: the file an earlier run fetched when it is intact, else fetched now, retried
    every RETRY_S until the day's fetch deadline (recorded, so a restart does not extend it). Never stale bars: when
    the deadline passes first, the day is `skipped` with the last reason and no cycle runs."""
    key, d, was = rec["_id"], rec["day"], rec["state"]
    if was == "fetched" and intact(rec.get("data") or {}):
        say(f"{d}: bars through {as_of} fetched before ({rec['data']['file']}); not fetched again")
        return rec
    deadline = rec.get("fetch_deadline")
    if deadline is None:
        deadline = (now() + fetch.within).timestamp()
        days.note(key, fetch_deadline=deadline)
    until, attempts = datetime.fromtimestamp(deadline, UTC), 0
    while True:
        _check(held)
        attempts += 1
        try:
            data = fetch_once(fetch, d, as_of)
            break
        except NotFresh as e:
            why = str(e)
        if now() + timedelta(seconds=RETRY_S) > until:
            actions.audit_fetch(
                {
                    "ok": False,
                    "check": "live_data",
                    "day": d,
                    "through": as_of,
                    "symbols": fetch.symbols,
                    "error": why,
                    "attempts": attempts,
                }
            )
            days.advance(key, was, "skipped", why=f"no fresh bars by {_ny(until)}: {why}", attempts=attempts)
            say(
                f"{d}: skipped, no cycle and no order: no fresh bars by {_ny(until)} after {attempts} attempt(s): {why}"
            )
            return days.get(key) or rec
        sleep(RETRY_S)
    actions.audit_fetch({"ok": True, "check": "live_data", "day": d, "attempts": attempts, **data})
    if not days.advance(key, was, "fetched", data=data, files=files_of(data), attempts=attempts):
        return days.get(key) or rec  # another process moved the day on: what it recorded stands
    say(
        f"{d}: fetched {', '.join(fetch.symbols)} from {data['source']} through {as_of} into {data['file']}"
        + (
            f"; {sum(data['news']['headlines'].values())} headline(s) into {data['news']['file']}"
            if data.get("news")
            else ""
        )
        + (f" ({attempts} attempts)" if attempts > 1 else "")
    )
    return days.get(key) or rec


def _check(held: Callable[[], bool]) -> None:
    if not held():
        raise LoopTakenOver(
            "another process took this loop's lease (it found this one dead): stopping without trading on"
        )


def _wait_until(
    at: datetime, now: Callable[[], datetime], sleep: Callable[[float], None], say: Callable[[str], None], line: str
) -> None:
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
