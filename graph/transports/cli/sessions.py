"""`tradegraph sessions` (and `sessions delete`, `sessions prune`), `events` and `portfolio`: what the store holds,
read (and deleted) through the kernel.

Tables never cut a value: on a narrow terminal the least useful columns are left out (and named under the table)
until every value fits whole, and a value wider than the whole terminal folds onto the next line."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from dataclasses import dataclass
from typing import Literal

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, add_db_flag, kernel_call

# events are read a page at a time: a long session never sits in memory twice
EVENTS_PAGE = 5000


def cmd_events(args) -> int:
    offset, unreadable = 0, []
    while True:
        page = kernel_call(
            args.db, "read_events", session_id=args.session_id, kind=args.kind, offset=offset, limit=EVENTS_PAGE
        )
        for ev in page.events:
            print(json.dumps(ev, default=str))
        unreadable += page.unreadable
        offset += len(page.events)
        if not page.events or offset >= page.total:
            break
    if not unreadable:
        return EXIT_OK
    # listed as stored, the store's reference where the payload was: printed, but never passed off as the log
    first = unreadable[0]
    print(
        f"tradegraph: error: {len(unreadable)} event(s) listed as stored, without their payload, which cannot be "
        f"read (first: seq {first.seq}: {first.reason}); `tradegraph replay {args.session_id} --verify` checks the "
        f"whole log",
        file=sys.stderr,
    )
    return EXIT_FAILED


# a status the user must act on or worry about stands out; the rest reads plain
STATUS_STYLE = {
    "completed": "green",
    "pending_approval": "yellow",
    "rejected": "yellow",
    "degraded": "yellow",
    "failed": "bold red",
    "executed_with_errors": "bold red",
    "cut_off": "bold red",
}


def _local_time(ts) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "—"


# ------------------------------------------------------------------------------ tables that fit
@dataclass
class Column:
    name: str
    cells: list[str]  # rich markup; what is measured is the text it shows
    justify: Literal["left", "right"] = "left"
    drop: int | None = None  # left out on a narrow terminal, lowest first; None: always shown


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain


def fitted_table(title: str, columns: list[Column], width: int):
    """A table whose every value shows whole at `width`: no column is narrower than its longest word (header
    included), so a value wraps between words, never inside one; while that does not fit, the droppable column
    with the lowest `drop` is left out. Only a word longer than a third of the width (a long run id) folds onto the
    next line, whole and in order. Returns (table, names of the columns left out)."""
    from rich.table import Table

    def words(c: Column) -> int:  # a word longer than a third of the terminal (a long run id) folds instead
        return min(width // 3, max(len(w) for text in [c.name, *map(_plain, c.cells)] for w in text.split() or [""]))

    def whole(c: Column) -> int:
        return max(len(text) for text in [c.name, *map(_plain, c.cells)])

    shown = list(columns)
    room = lambda cols: width - 3 * len(cols) - 1  # noqa: E731 - each column's padding and border, the last border
    for victim in sorted((c for c in columns if c.drop is not None), key=lambda c: c.drop or 0):
        if sum(map(words, shown)) <= room(shown):
            break
        shown.remove(victim)
    widths = [words(c) for c in shown]
    spare = room(shown) - sum(widths)
    # what is left widens columns to one line per value, the cheapest first (the most columns on one line)
    for i in sorted(range(len(shown)), key=lambda i: whole(shown[i]) - widths[i]):
        grow = min(max(0, spare), whole(shown[i]) - widths[i])
        widths[i], spare = widths[i] + grow, spare - grow
    while spare < 0 and max(widths) > 8:  # the columns kept still too wide for a very narrow terminal: they fold
        i = widths.index(max(widths))
        widths[i], spare = widths[i] - 1, spare + 1
    t = Table(title=title)
    for c, w in zip(shown, widths):
        # fold, never the ellipsis: only a word longer than the whole terminal ever continues on the next line
        t.add_column(c.name, justify=c.justify, overflow="fold", width=w)
    for row in zip(*(c.cells for c in shown)):
        t.add_row(*row)
    return t, [c.name for c in columns if c not in shown]


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def cmd_sessions(args) -> int:
    if args.action == "delete":
        return _print_deletions(
            kernel_call(
                args.db,
                "delete_session",
                session_id=args.session_id,
                dry_run=args.dry_run,
                keep_memories=args.keep_memories,
                by=args.by,
                force=args.force,
            ),
            args.json,
            f"session '{args.session_id}'",
        )  # never empty: unknown is NotFound
    if args.action == "prune":
        return _print_deletions(
            kernel_call(
                args.db,
                "prune_sessions",
                older_than=args.older_than,
                kind=args.kind,
                dry_run=args.dry_run,
                keep_memories=args.keep_memories,
                by=args.by,
                force=args.force,
            ),
            args.json,
            f"no {args.kind + ' ' if args.kind else ''}session last written more than {args.older_than} ago",
        )
    out = kernel_call(args.db, "list_sessions", limit=args.limit, all=args.all)
    sessions = out.sessions
    if args.json:  # the machine form: one JSON object per line
        for s in sessions:
            print(json.dumps(s.model_dump(mode="json"), default=str))
        return EXIT_OK
    from rich.console import Console

    def status(s) -> str:
        shown = s.status or "—"
        if s.doubt:  # read from a log that no longer matches what vouched for it: never shown as plain truth
            return f"[bold red]{shown} (?)[/]"
        return f"[{STATUS_STYLE.get(shown, 'white')}]{shown}[/]"

    columns = [
        Column("session", [s.session_id for s in sessions]),
        Column("kind", [s.kind for s in sessions], drop=1),
        Column("started", [_local_time(s.first_ts) for s in sessions], drop=4),
        Column("cycles", [f"{s.cycles:,}" for s in sessions], "right", drop=5),
        Column("last status", [status(s) for s in sessions]),
        Column("symbols", [", ".join(s.symbols) or "—" for s in sessions], drop=3),
        Column("last as-of", [s.as_of or "—" for s in sessions], drop=6),
        Column(
            "events", [f"{s.events:,}" + (f" (+{s.behind:,})" if s.behind else "") for s in sessions], "right", drop=2
        ),
        Column("size", [_size(s.bytes) for s in sessions], "right", drop=0),
    ]
    console = Console()
    table, left_out = fitted_table(f"{len(sessions)} most recent session(s)", columns, console.width)
    notes = ["times are this machine's local time"]
    if left_out:
        notes.append(f"narrow terminal: {', '.join(left_out)} not shown (--json has every field)")
    if any(s.behind for s in sessions):
        notes.append(
            "(+N): events stored after the summary was last brought up to date: a cycle still running, or "
            "a writer stopped before it summarised (`tradegraph store reindex` rebuilds the summaries)"
        )
    if out.unsummarised:
        notes.append(
            f"at least {out.unsummarised} session(s) in the log have no summary yet and are not listed "
            f"(`tradegraph store reindex` adds them)"
        )
    for s in sessions:
        if s.doubt:
            notes.append(
                f"(?) {s.session_id}: status not vouched for: {s.doubt} (`tradegraph replay {s.session_id} "
                f"--check-chain`)"
            )
    if out.replays_hidden:
        notes.append("replay sessions (replay-<session>-<n>) hidden: --all shows them")
    table.caption = "\n".join(notes)
    console.print(table)
    return EXIT_OK


def _print_deletions(out, as_json: bool, nothing: str) -> int:
    if as_json:
        print(out.model_dump_json())
        return EXIT_OK
    verb = "would delete" if out.dry_run else "deleted"
    if not out.sessions:
        print(f"{nothing}: nothing to delete")
    for d in out.sessions:
        what = f"{d.kind}" + (f", replay of {d.replay_of}" if d.replay_of else "")
        head = f"chain head seq {d.head['seq']}, hash {d.head['hash']}" if d.head else "no chain head"
        last = f", last written {_local_time(d.last_ts)}" if d.last_ts else ""
        record = f"; admin log record {d.admin_seq}" if d.admin_seq is not None else ""
        print(
            f"{verb} {d.session_id} ({what}): {d.events:,} event(s), {d.cycles:,} cycle(s), {_size(d.bytes)}"
            f"{last}; {head}{record}"
        )
    if out.dry_run:
        print(f"dry run: nothing deleted ({len(out.sessions)} session(s) would be)")
    if out.note:
        print(f"note: {out.note}")
    return EXIT_OK


def _me() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container): say where it came from
        return "cli"


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

    c = Console()
    ps = view.positions
    columns = [
        Column("symbol", [p.symbol for p in ps] or ["(no open position)"]),
        Column("quantity", [f"{p.quantity:g}" for p in ps] or [""], "right"),
        Column("avg price", [_money(p.avg_price) for p in ps] or [""], "right", drop=4),
        Column("price", [_money(p.price) for p in ps] or [""], "right"),
        Column("market value", [_money(p.market_value) for p in ps] or [""], "right"),
        Column(
            "unrealised",
            [
                _signed(p.unrealized_pnl) + ("" if p.unrealized_pct is None else f" ({p.unrealized_pct:+.2f}%)")
                for p in ps
            ]
            or [""],
            "right",
        ),
        Column("stop", [_money(p.stop) for p in ps] or [""], "right", drop=3),
        Column("target", [_money(p.target) for p in ps] or [""], "right", drop=2),
        Column("opened", [p.opened or "—" for p in ps] or [""], drop=0),
        Column(
            "age",
            [f"{p.age_sessions}" + (f"/{p.horizon_sessions}" if p.horizon_sessions else "") for p in ps] or [""],
            "right",
            drop=1,
        ),
    ]
    t, left_out = fitted_table(
        f"portfolio {view.session_id} at {view.as_of or '—'} (version {view.version}, {view.fills} fill(s))",
        columns,
        c.width,
    )
    if left_out:
        t.caption = f"narrow terminal: {', '.join(left_out)} not shown (--json has every field)"
    c.print(t)
    c.print(f"cash {_money(view.cash)}   equity {_money(view.equity)}   starting cash {_money(view.starting_cash)}")
    c.print(
        f"P&L total {_signed(view.total_pnl)} = realised {_signed(view.realized_pnl)} (fees "
        f"{_money(view.fees_paid)} included) + unrealised {_signed(view.unrealized_pnl)}"
    )
    missing = [p.symbol for p in view.positions if p.price is None]
    if missing:
        c.print(
            f"[yellow]warning:[/] no price at {view.as_of} for {', '.join(missing)}: equity and unrealised "
            f"P&L are not known"
        )
    return EXIT_OK


def _event_kind(value: str) -> str:
    """--kind checked when given, against schemas/event_kinds.py (no event model built; the parser of every other
    command need not import even that)."""
    from schemas.event_kinds import EVENT_KINDS

    if value not in EVENT_KINDS:
        raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(EVENT_KINDS)})")
    return value


def register(sub) -> None:
    e = sub.add_parser("events", help="print a session's state_events as JSON lines, in seq order")
    e.add_argument("session_id")
    e.add_argument(
        "--kind",
        default=None,
        type=_event_kind,
        metavar="KIND",
        help="one event kind: manifest, "
        "transition, llm_request, … (one that does not exist is an error listing them all)",
    )
    add_db_flag(e)
    e.set_defaults(fn=cmd_events)

    s = sub.add_parser(
        "sessions",
        help="list recent sessions (from their summaries); `sessions delete SID` and "
        "`sessions prune --older-than 30d` delete, recorded in the admin log",
    )
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--all", action="store_true", help="include replay sessions (one per `replay --verify`)")
    s.add_argument("--json", action="store_true", help="one JSON object per session (the machine form)")
    add_db_flag(s)
    s.set_defaults(fn=cmd_sessions, action=None)
    actions = s.add_subparsers(dest="action", metavar="{delete,prune}")
    d = actions.add_parser(
        "delete",
        help="delete a session and its replay sessions (events, summary, book, "
        "ledger, checkpoints, memories), recorded in the admin log",
    )
    d.add_argument("session_id")
    p = actions.add_parser("prune", help="delete every session last written longer ago than --older-than")
    p.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 30d, 12h, 90m, 2w")
    p.add_argument(
        "--kind",
        choices=("run", "backtest", "replay", "studio", "other"),
        default=None,
        help="only sessions of this kind (default: every kind)",
    )
    for a in (d, p):
        a.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
        a.add_argument("--keep-memories", action="store_true", help="leave the notes its cycles wrote")
        a.add_argument(
            "--force",
            action="store_true",
            help="delete a session with a cycle in flight, a task running "
            "or written to in the last minute too (its running cycle "
            "is fenced: what it writes after is removed and it "
            "stops); prune: sessions paused for approval too",
        )
        a.add_argument("--by", default=_me(), help="who deletes, as the admin log records it (default: %(default)s)")
        a.add_argument("--json", action="store_true", help="print one JSON object")
        # given after the action (`sessions delete X --db …`) or before it: the parent's value is not reset
        a.add_argument("--db", default=argparse.SUPPRESS, help="store URI (as for `sessions`)")

    p = sub.add_parser(
        "portfolio", help="a session's positions (with stop, target, age), cash, equity and P&L at its last as-of"
    )
    p.add_argument("session_id")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_db_flag(p)
    p.set_defaults(fn=cmd_portfolio)
