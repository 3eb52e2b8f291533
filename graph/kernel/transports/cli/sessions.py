"""`tradegraph sessions`, `events` and `portfolio`: what the store holds, read through the kernel."""
from __future__ import annotations

import json
import time

from schemas.events import EVENT_KINDS

from graph.kernel.transports.cli.common import EXIT_OK, add_db_flag, kernel_call


# events are read a page at a time: a long session never sits in memory twice
EVENTS_PAGE = 5000


def cmd_events(args) -> int:
    offset = 0
    while True:
        page = kernel_call(args.db, "read_events", session_id=args.session_id, kind=args.kind, offset=offset,
                           limit=EVENTS_PAGE)
        for ev in page.events:
            print(json.dumps(ev, default=str))
        offset += len(page.events)
        if not page.events or offset >= page.total:
            return EXIT_OK


# a status the user must act on or worry about stands out; the rest reads plain
STATUS_STYLE = {"completed": "green", "pending_approval": "yellow", "rejected": "yellow", "degraded": "yellow",
                "failed": "bold red", "executed_with_errors": "bold red", "cut_off": "bold red"}


def _local_time(ts) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "—"


def cmd_sessions(args) -> int:
    sessions = kernel_call(args.db, "list_sessions", limit=args.limit).sessions
    if args.json:  # the machine form: one JSON object per line
        for s in sessions:
            print(json.dumps(s.model_dump(mode="json"), default=str))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{len(sessions)} most recent session(s)", caption="times are this machine's local time")
    for col, justify in (("session", "left"), ("started", "left"), ("cycles", "right"), ("last status", "left"),
                         ("symbols", "left"), ("last as-of", "left"), ("events", "right")):
        t.add_column(col, justify=justify, no_wrap=col in ("session", "started"))
    for s in sessions:
        status = s.status or "—"
        t.add_row(s.session_id, _local_time(s.first_ts), str(s.cycles),
                  f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]", ",".join(s.symbols) or "—", s.as_of or "—",
                  f"{s.events:,}")
    Console().print(t)
    return EXIT_OK


def _money(v) -> str:
    return "—" if v is None else f"{v:,.2f}"


def _signed(v, suffix: str = "") -> str:
    if v is None:
        return "—"
    return f"[{'green' if v > 0 else 'red' if v < 0 else 'white'}]{v:+,.2f}{suffix}[/]"


def cmd_portfolio(args) -> int:
    view = kernel_call(args.db, "portfolio", session_id=args.session_id)
    if args.json:
        print(view.model_dump_json())
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    c = Console()
    t = Table(title=f"portfolio {view.session_id} at {view.as_of or '—'} (version {view.version}, "
                    f"{view.fills} fill(s))")
    for col in ("symbol", "quantity", "avg price", "price", "market value", "unrealised", "stop", "target",
                "opened", "age"):
        t.add_column(col, justify="left" if col in ("symbol", "opened") else "right")
    for p in view.positions:
        age = f"{p.age_sessions}" + (f"/{p.horizon_sessions}" if p.horizon_sessions else "")
        t.add_row(p.symbol, f"{p.quantity:g}", _money(p.avg_price), _money(p.price), _money(p.market_value),
                  _signed(p.unrealized_pnl) + ("" if p.unrealized_pct is None else f" ({p.unrealized_pct:+.2f}%)"),
                  _money(p.stop), _money(p.target), p.opened or "—", age)
    if not view.positions:
        t.add_row("(no open position)", *[""] * 9)
    c.print(t)
    c.print(f"cash {_money(view.cash)}   equity {_money(view.equity)}   starting cash {_money(view.starting_cash)}")
    c.print(f"P&L total {_signed(view.total_pnl)} = realised {_signed(view.realized_pnl)} (fees "
            f"{_money(view.fees_paid)} included) + unrealised {_signed(view.unrealized_pnl)}")
    missing = [p.symbol for p in view.positions if p.price is None]
    if missing:
        c.print(f"[yellow]warning:[/] no price at {view.as_of} for {', '.join(missing)}: equity and unrealised "
                f"P&L are not known")
    return EXIT_OK


def register(sub) -> None:
    e = sub.add_parser("events", help="print a session's state_events as JSON lines, in seq order")
    e.add_argument("session_id")
    e.add_argument("--kind", default=None, choices=EVENT_KINDS)
    add_db_flag(e)
    e.set_defaults(fn=cmd_events)

    s = sub.add_parser("sessions", help="list recent sessions")
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--json", action="store_true", help="one JSON object per session (the machine form)")
    add_db_flag(s)
    s.set_defaults(fn=cmd_sessions)

    p = sub.add_parser("portfolio", help="a session's positions (with stop, target, age), cash, equity and P&L "
                                         "at its last as-of")
    p.add_argument("session_id")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_db_flag(p)
    p.set_defaults(fn=cmd_portfolio)
