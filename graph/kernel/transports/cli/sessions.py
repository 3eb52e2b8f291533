"""`tradegraph sessions` and `tradegraph events`: what the store holds, read through the kernel."""
from __future__ import annotations

import json

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


def cmd_sessions(args) -> int:
    for s in kernel_call(args.db, "list_sessions", limit=args.limit).sessions:
        print(json.dumps(s.model_dump(mode="json"), default=str))
    return EXIT_OK


def register(sub) -> None:
    e = sub.add_parser("events", help="print a session's state_events as JSON lines, in seq order")
    e.add_argument("session_id")
    e.add_argument("--kind", default=None, choices=EVENT_KINDS)
    add_db_flag(e)
    e.set_defaults(fn=cmd_events)

    s = sub.add_parser("sessions", help="list recent sessions")
    s.add_argument("--limit", type=int, default=20)
    add_db_flag(s)
    s.set_defaults(fn=cmd_sessions)
