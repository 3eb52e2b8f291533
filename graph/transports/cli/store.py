"""`tradegraph store`: this machine's embedded server and the spool (direct: the kernel needs the store running)."""

from __future__ import annotations

from typing import Any

from graph.transports.cli.common import EXIT_OK, _print_json, add_db_flag, open_store


def cmd_store(args) -> int:
    from database import embedded

    home = embedded.resolve_home()
    if args.action == "start":
        port, pid = embedded.start_server(home.path)
        print(f"embedded store at {home.describe()} running on 127.0.0.1:{port} (pid {pid}); later commands reuse it")
    elif args.action == "stop":
        print(
            f"stopped the embedded store at {home.path}"
            if embedded.stop_server(home.path)
            else f"no embedded store was running at {home.path}"
        )
    elif args.action == "recover":
        return _store_recover(args)
    elif args.action == "reindex":
        return _store_reindex(args)
    elif args.action == "compact":
        return _store_compact(args)
    else:
        return _store_status(args, home)
    return EXIT_OK


def _store_status(args, home) -> int:
    """Where the commands run from here keep their store, and whether its server runs: a line per fact, or one JSON
    object with --json. Opens nothing: asking where the store is never starts one."""
    import os

    from database import embedded
    from database.connection import redact
    from database.spool import pending_files

    uri = args.db or os.environ.get("MONGODB_URI") or None
    spool = home.path / "spool"
    status: dict[str, Any] = {
        "store": redact(uri) if uri else f"embedded at {home.path}",
        "chosen_by": ("--db" if args.db else "MONGODB_URI") if uri else home.chosen_by,
        "spool": str(spool),
        "spooled_files": len(pending_files(spool)),
        "embedded": None if uri else embedded.server_status(home.path),
    }
    if args.json:
        _print_json(status)
        return EXIT_OK
    print(f"store: {status['store']} (" + (f"from {status['chosen_by']}" if uri else home.reason()) + ")")
    server = status["embedded"]
    if server is not None:
        print(
            f"server: running on 127.0.0.1:{server['port']} (pid {server['pid']})"
            if server["running"]
            else "server: not running (a command starts it, and stops it when it ends; `store start` keeps it running)"
        )
    print(f"spool: {spool} ({status['spooled_files']} file(s) waiting for redelivery)")
    return EXIT_OK


def _store_recover(args) -> int:
    """Redeliver spooled audit events and finish half-done fills; says what it did."""
    from database.portfolio import complete_pending
    from database.spool import pending_files

    store = open_store(args.db)  # connecting already redelivers what it can; report it in full here
    try:
        report = store.recover_spool()
        fills = complete_pending(store.portfolios, store.executions)
        left = pending_files(store.spool_dir)
        print(
            f"{report.line()}; fills completed {fills['committed']}, aborted {fills['aborted']}; "
            f"{len(left)} spool file(s) left in {store.spool_dir}"
        )
        for cycle in _finish_approvals(store):
            print(
                f"cycle {cycle.cycle_id}: its approver stopped after its fill was started; the approval is "
                f"finished, the cycle ended {cycle.status}"
            )
    finally:
        store.close()
    return EXIT_OK


def _finish_approvals(store) -> list:
    """Cycles whose approver died after starting their fill, resumed with that approval (graph/machine/runner.py)."""
    from agent.config import command_config
    from graph.machine.cycle_context import default_services
    from graph.machine.runner import finish_started_approvals

    return finish_started_approvals(store, lambda: default_services(command_config()))


def _store_compact(args) -> int:
    """Give back the space deleted sessions freed (database/compact.py): bytes before and after."""
    from database.compact import compact

    store = open_store(args.db)
    try:
        out = compact(store)
    finally:
        store.close()
    if args.json:
        _print_json(
            {
                "where": out.where,
                "how": out.how,
                "bytes_before": out.before,
                "bytes_after": out.after,
                "bytes_reclaimed": out.reclaimed,
                "note": out.note,
            }
        )
    else:
        print(out.line())
    return EXIT_OK


def _store_reindex(args) -> int:
    """Rebuild every session summary from the log (the log is the truth, the summaries a cache of it): what a
    writer killed before it summarised left behind is corrected, summaries of sessions with no event removed."""
    import sys

    import graph.machine.recording  # noqa: F401 - registers how a summary reads a cycle's status

    store = open_store(args.db)
    try:
        tty = sys.stderr.isatty()

        def progress(done: int, total: int) -> None:
            if tty:
                print(f"\rreindexing sessions: {done}/{total}", end="", file=sys.stderr, flush=True)

        out = store.sessions.reindex(progress)
        if tty:
            print(file=sys.stderr)
        print(
            f"reindexed {out['sessions']} session(s) from {out['events']:,} event(s) in {out['seconds']:.1f} s: "
            f"{out['corrected']} summary(ies) added or corrected, {out['removed']} removed (no event left)"
        )
    finally:
        store.close()
    return EXIT_OK


def register(sub) -> None:
    st = sub.add_parser(
        "store",
        help="manage the embedded store (start keeps it running for later commands); "
        "recover redelivers spooled audit events and finishes half-done fills; "
        "reindex rebuilds the session summaries from the log; compact gives back "
        "the disk space deleted sessions freed (docs/store.md)",
    )
    st.add_argument("action", choices=["start", "stop", "status", "recover", "reindex", "compact"])
    st.add_argument("--json", action="store_true", help="status, compact: one JSON object")
    add_db_flag(st)
    st.set_defaults(fn=cmd_store)
