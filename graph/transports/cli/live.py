"""`tradegraph live --broker alpaca --symbols … --at 09:35`: the daily loop (graph/services/broker/live.py) with the
kernel's run_cycle, approve and broker_reconcile as its actions, on the wall clock. CLI only, not a kernel task:
it runs for days and waits on people, and a task worker would hold a slot that long; its steps are capabilities.

Without --prices it fetches each day's bars with `data fetch`'s source into <runs>/live-NAME/ (graph/kernel/runs.py),
each fetch a `validation` event (check `live_data`) in the session livedata-NAME; with --prices it reads that file
as it is (no fetch). One process per loop name: the loop's lease (database/live_days.py LoopLeases)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, add_db_flag, kernel
from graph.transports.cli.data import add_data_flags, data_inputs
from graph.transports.cli.foreground import Waited, close_under

_SPAN = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_at(text: str) -> timedelta:
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", text or "")
    if not m or int(m[1]) > 23 or int(m[2]) > 59:
        raise CliError(f"--at {text!r}: not a New York time HH:MM")
    return timedelta(hours=int(m[1]), minutes=int(m[2]))


def parse_span(text: str, flag: str = "--approve-within") -> timedelta:
    m = _SPAN.fullmatch(text or "")
    if not m or int(m[1]) == 0:
        raise CliError(f"{flag} {text!r}: not a duration like 30m, 2h, 90s")
    return timedelta(seconds=int(m[1]) * _UNITS[m[2]])


class KernelActions:
    """The loop's actions through the kernel, as the `cli` transport: the same checks and audit as `run`,
    `approve` and `broker reconcile`."""

    def __init__(self, k: Any, session_id: str, symbols: list[str], broker: str, data: dict[str, str]) -> None:
        self.k, self.session_id, self.symbols, self.broker, self.data = k, session_id, symbols, broker, data
        self._paused: set[str] = set()

    def open_session(self) -> None:
        """The loop's session exists before its first cycle, so a restart finds every day's cycle in it."""
        from agent.config import AgentConfig
        from schemas.portfolio import PortfolioSnapshot

        store, sid = self.k.store, self.session_id
        if store.portfolios.load(sid) is None and not store.events.exists(sid):
            store.portfolios.commit(sid, PortfolioSnapshot(cash=AgentConfig.from_env().starting_cash), f"{sid}:c0", 0)

    def cycles(self) -> int:
        return len(self.k.store.events.cycle_ids(self.session_id))

    def run(self, as_of: str, files: dict[str, str]) -> tuple[str, str]:
        out = self.k.call(
            "run_cycle",
            {
                "symbols": self.symbols,
                "as_of": as_of,
                "session_id": self.session_id,
                "approve": True,
                "broker": self.broker,
                **self.data,
                **files,
            },
            transport="cli",
        )
        return out.cycle_id, out.status

    def audit_fetch(self, record: dict[str, Any]) -> None:
        """In the loop's data session (`livedata-NAME`: never a trading session's id, which starts `live-`), one
        cycle id per fetch as the broker-control session does: the trading session's cycles stay its cycles."""
        from schemas.events import new_event

        store, sid = self.k.store, "livedata-" + self.session_id.removeprefix("live-")
        with store.writer(background=False) as writer:
            writer.put(new_event(sid, f"{sid}:c{store.events.next_cycle(sid)}", "RUNNER", "validation", record))

    def status(self, cycle_id: str) -> Optional[str]:
        """The cycle's status; `deciding` while an approver holds its claim. Polled while a cycle waits, so the
        session's whole recording is read only until the cycle is seen paused (it changes only through a claim)."""
        from database.approvals import Decisions
        from graph.machine.recording import load_session_log
        from schemas.events import CycleEndedEvent, parse_event

        store = self.k.store
        ended = [
            e
            for e in map(parse_event, store.events.read(self.session_id, kind="cycle_ended", cycle_id=cycle_id))
            if isinstance(e, CycleEndedEvent)
        ]
        if ended:
            return str(ended[-1].payload.status)
        held = Decisions(store.db).held(cycle_id)
        if held is not None:
            return str(held.get("status") or "deciding") if held.get("state") == "decided" else "deciding"
        if cycle_id in self._paused:
            return "pending_approval"
        if not store.events.exists(self.session_id):
            return None
        found = [c for c in load_session_log(store, self.session_id).cycles if c.cycle_id == cycle_id]
        if found and found[0].status == "pending_approval":
            self._paused.add(cycle_id)
        return str(found[0].status) if found else None

    def reject(self, by: str) -> Optional[str]:
        from graph.kernel.errors import KernelError

        try:
            self.k.call("approve", {"session_id": self.session_id, "approved": False, "by": by}, transport="cli")
        except KernelError as e:  # decided already (or being decided): the gate refused the expiry
            return e.message
        return None

    def reconcile(self) -> dict[str, Any]:
        return self.k.call("broker_reconcile", {"session_id": self.session_id}, transport="cli").model_dump()


def _now() -> datetime:
    return datetime.now(UTC)


RENEW_S = 30.0  # the lease's renewal period (LEASE_S in database/live_days.py is four of these)


@contextmanager
def loop_lease(db: Any, loop: str, session_id: str) -> Iterator[threading.Event]:
    """This process's lease on the loop, renewed in the background; the event is set once it was lost. Another
    live holder: one line, exit 2, before anything is fetched or run."""
    from database.live_days import LoopLeases

    leases = LoopLeases(db)
    token, holder = leases.take(loop)
    if token is None:
        who = (holder or {}).get("owner") or {}
        since = holder.get("at") if holder else None
        at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(since))) if since else "an unknown time"
        raise CliError(
            f"--name {loop}: the loop (session {session_id}) is already running: pid {who.get('pid')} "
            f"on {who.get('host')} since {at}; one process per loop name"
        )
    lost, stop = threading.Event(), threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_S):
            try:
                if not leases.renew(loop, token):
                    lost.set()
                    return
            except Exception:  # noqa: BLE001 - a store hiccup: tried again next period; the lease outlives a few
                pass

    t = threading.Thread(target=renew, name=f"live-lease-{loop}", daemon=True)
    t.start()
    try:
        yield lost
    finally:
        stop.set()
        t.join(timeout=5)
        if not lost.is_set():
            leases.release(loop, token)


def day_fetch(args, symbols: list[str], session_id: str) -> Any:
    """How the loop gets each day's bars: None when --prices names a file (read as it is, never fetched);
    else fetched by the loop with `data fetch`'s source (its extra checked now: exit 2 before the loop starts),
    with each symbol's latest headlines unless --news names a file (read as it is)."""
    from agent.data.market import DataError
    from graph.kernel.runs import runs_dir
    from graph.services.broker.live_data import Fetch, yfinance_getter, yfinance_news_getter

    within = parse_span(args.fetch_within, "--fetch-within")
    if args.prices is not None:
        return None
    try:
        get = yfinance_getter()
        news = yfinance_news_getter() if args.news is None else None
    except DataError as e:
        raise CliError(f"tradegraph live fetches each day's bars without --prices: {e}") from None
    return Fetch(symbols=symbols, folder=runs_dir() / session_id, within=within, get=get, news=news)


def cmd_live(args, now=_now, sleep=time.sleep) -> int:
    from agent.brokers import BrokerConfigError
    from agent.brokers.settings import check_broker_env
    from database.live_days import LiveDays
    from graph.machine.runner import InputError, parse_symbols
    from graph.services.broker.live import LoopTakenOver, Plan, live

    approve_within = parse_span(args.approve_within)
    try:
        symbols = parse_symbols(args.symbols)
        check_broker_env(given=args.broker)
    except (InputError, BrokerConfigError) as e:
        raise CliError(str(e)) from None
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", args.name):
        raise CliError(f"--name {args.name!r}: letters, digits, '_', '.', '-' only")
    if args.days is not None and args.days < 1:
        raise CliError(f"--days {args.days}: must be 1 or more")
    session_id = f"live-{args.name}"
    plan = Plan(
        loop=args.name,
        at=parse_at(args.at),
        approve_within=approve_within,
        days=args.days,
        fetch=day_fetch(args, symbols, session_id),
    )
    looping, opened = Waited(), []  # opened: the kernel, once open (closed under the loop by a second Ctrl-C)
    stopped = f"tradegraph live: stopped; run it again to resume (session {session_id})"

    def run_loop() -> int:
        with kernel(args.db) as k, loop_lease(k.store.db, args.name, session_id) as lost:
            opened.append(k)
            actions = KernelActions(k, session_id, symbols, args.broker, data_inputs(args, continuing=True))
            actions.open_session()
            try:
                n = live(
                    plan,
                    LiveDays(k.store.db),
                    actions,
                    now=now,
                    sleep=pausing(sleep, looping),
                    say=lambda s: print(s, flush=True),
                    held=lambda: not stopping(looping) and not lost.is_set(),
                )
            except KeyboardInterrupt:
                print(stopped, flush=True)
                return 130
            except LoopTakenOver as e:
                raise CliError(f"tradegraph live --name {args.name}: {e}", EXIT_FAILED) from None
        print(f"tradegraph live: {n} trading day(s) handled (session {session_id})")
        return EXIT_OK

    # the loop, its store calls and its store's close run on a thread of their own, the main thread only waiting:
    # a Ctrl-C landing inside pymongo could leave a pool lock held for ever (foreground.py Waited). The first one
    # stops the loop where it next pauses (the cycle under way ends first, at its approval pause at the latest)
    try:
        return looping.run(run_loop)
    except KeyboardInterrupt:
        print(
            "tradegraph live: stopping where the loop next pauses (a cycle under way ends first); "
            "Ctrl-C again stops at once",
            flush=True,
        )
        looping.halt()
        try:
            return looping.outcome()
        except KeyboardInterrupt:  # a second Ctrl-C: the store closed under the loop, which fails where it is
            close_under(looping, [k.store for k in opened])
            print(stopped, flush=True)
            return 130


def stopping(looping: Waited) -> bool:
    """Asked before every claim, fetch, cycle and reconcile (between store calls): a Ctrl-C stops the loop there
    too, so one that came while it started on a day already due runs no cycle."""
    if looping.stop:
        raise KeyboardInterrupt
    return False


def pausing(sleep: Callable[[float], None], looping: Waited) -> Callable[[float], None]:
    """The loop's every wait, where a Ctrl-C stops it: between its store calls, never inside one. The wall clock's
    sleep is woken at once by the stop; a test's clock is called as it is."""
    wake = threading.Event()
    looping.opened(lambda: wake, threading.Event.set)  # halt() sets it, from the main thread

    def pause(seconds: float) -> None:
        if not looping.stop:
            if sleep is time.sleep:
                wake.wait(seconds)
            else:
                sleep(seconds)
        stopping(looping)

    return pause


def register(sub) -> None:
    p = sub.add_parser("live", help="one broker cycle per trading day at a New York time, approved by a person")
    p.add_argument("--broker", required=True, choices=["alpaca"], help="where orders go (paper; docs/brokers.md)")
    p.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    p.add_argument("--at", default="09:35", help="New York time of the daily cycle, HH:MM (default 09:35)")
    p.add_argument("--approve-within", default="30m", help="after this the cycle expires with no order (30m, 2h)")
    p.add_argument(
        "--fetch-within",
        default="30m",
        help="without --prices: how long a day's bars are retried while the source fails or lags; then "
        "the day is skipped (default 30m)",
    )
    p.add_argument("--name", default="default", help="the loop's name: its session is live-NAME (default: default)")
    p.add_argument("--days", type=int, default=None, help="stop after this many trading days (default: never)")
    add_data_flags(p)
    add_db_flag(p)
    p.set_defaults(fn=cmd_live)
