"""`tradegraph audit lookahead SESSION_OR_RUN`: every bar, news item, filing or memory a recorded cycle saw dated
after its decision time (graph/services/replay/lookahead.py), for a session, a backtest run id (its session bt-<id>), or a
benchmark or sweep id (every run's session). Exit 0 when there is none, 1 otherwise (a cycle nothing says the
decision time of counts against it too, and so does a session whose hash chain is broken: its log is no evidence)."""

from __future__ import annotations

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK


def cmd_lookahead(args) -> int:
    from graph.transports.cli.common import kernel

    with kernel(args.db, experiments_dir=args.out) as k:
        out = k.call("audit_lookahead", {"target": args.target}, transport="cli")
    if args.json:
        print(out.model_dump_json())
    else:
        checked = ", ".join(f"{n:,} {kind}" for kind, n in out.checked.items())
        what = out.resolved if out.resolved == "session" else f"{out.resolved} {out.target}"
        print(f"look-ahead audit of {what}: {len(out.sessions)} session(s), {out.cycles} cycle(s), {checked} checked")
        for leak in out.leaks:
            print(
                f"  LEAK {leak['cycle_id']}: {leak['kind']} {leak.get('symbol') or ''} dated {leak['dated']} "
                f"(known {leak['known_at']} UTC) reached a decision taken at {leak['decision_time']} UTC, in "
                f"{leak['where']}"
            )
        for cycle in out.unaudited:
            print(f"  UNAUDITED {cycle['cycle_id']}: {cycle['note']}")
        for b in out.broken:
            print(f"  BROKEN {b['session_id']}: hash chain broken at seq {b['seq']}: {b['reason']}")
        print(
            f"{len(out.leaks)} leak(s)"
            + (f", {len(out.unaudited)} cycle(s) unaudited" if out.unaudited else "")
            + (f", {len(out.broken)} session(s) with a broken hash chain: not audited evidence" if out.broken else "")
        )
    return EXIT_OK if out.clean else EXIT_FAILED


def register(subparsers) -> None:
    from graph.transports.cli.common import add_db_flag, add_runs_flag

    a = subparsers.add_parser("audit", help="audit recorded sessions (look-ahead)")
    sub = a.add_subparsers(dest="audit", required=True)
    la = sub.add_parser(
        "lookahead",
        help="list evidence dated after its cycle's decision time; exit 1 if any",
        description="Reads the recording only (the store's events): each cycle's decision time from "
        "its manifest, and every bar, headline, filing and memory in what its agents saw.",
    )
    la.add_argument(
        "target",
        metavar="SESSION_OR_RUN",
        help="a session id, a backtest run id (session bt-<id>), or a benchmark or sweep id",
    )
    la.add_argument("--json", action="store_true", help="print one JSON object")
    add_runs_flag(la, "the runs folder a benchmark or sweep id is looked up in")
    add_db_flag(la)
    la.set_defaults(fn=cmd_lookahead)
