"""`tradegraph store`: this machine's embedded server and the spool (direct: the kernel needs the store running)."""
from __future__ import annotations

from graph.kernel.transports.cli.common import EXIT_OK, _print_json, add_db_flag, open_store


def cmd_store(args) -> int:
    from database import embedded

    if args.action == "start":
        port, pid = embedded.start_server()
        print(f"embedded store running on 127.0.0.1:{port} (pid {pid}); later commands reuse it")
    elif args.action == "stop":
        print("stopped" if embedded.stop_server() else "no embedded store was running")
    elif args.action == "recover":
        return _store_recover(args)
    else:
        _print_json(embedded.server_status())
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
        print(f"{report.line()}; fills completed {fills['committed']}, aborted {fills['aborted']}; "
              f"{len(left)} spool file(s) left in {store.spool_dir}")
    finally:
        store.close()
    return EXIT_OK


def register(sub) -> None:
    st = sub.add_parser("store", help="manage the embedded store (start keeps it running for later commands); "
                                      "recover redelivers spooled audit events and finishes half-done fills")
    st.add_argument("action", choices=["start", "stop", "status", "recover"])
    add_db_flag(st)
    st.set_defaults(fn=cmd_store)
