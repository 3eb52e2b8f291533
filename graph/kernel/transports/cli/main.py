"""The `tradegraph` command line. Each command is a thin shell over a library function."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from database.errors import StoreUnavailable
from schemas.events import EVENT_KINDS

from graph.kernel.transports.cli import backtest, memory, replay
from graph.kernel.transports.cli.common import (EXIT_EXECUTED_WITH_ERRORS, EXIT_FAILED, EXIT_INPUT, EXIT_OK,
                                                EXIT_STORE, CliError, _print_json, kernel_call, open_store)

__all__ = ["main", "build_parser", "cycle_exit_code", "CliError", "open_store", "EXIT_OK", "EXIT_FAILED",
           "EXIT_INPUT", "EXIT_STORE", "EXIT_EXECUTED_WITH_ERRORS"]


# ------------------------------------------------------------------ run / approve
def _cycle_command(args, capability: str, **inputs) -> int:
    """Shared shell of `run` and `approve`: the configuration checked first (a bad setting is exit 2, before any
    store is opened), the capability through the kernel, the approval screen."""
    from agent.config import AgentConfig, ConfigError
    from graph.kernel.transports.cli.render import print_cycle

    try:
        AgentConfig.from_env(memory=getattr(args, "memory", None))
    except ConfigError as e:
        raise CliError(str(e)) from None
    out = kernel_call(args.db, capability, **inputs)
    if args.json:
        _print_json(out.summary())
    else:
        print_cycle(out)
    if out.audit_error:  # the result above stands; its audit waits in the local spool
        print(f"tradegraph: error: {out.audit_error}", file=sys.stderr)
        return EXIT_STORE
    return cycle_exit_code(out.status)


def cycle_exit_code(status: str) -> int:
    from graph.nodes.common import EXECUTED_WITH_ERRORS

    if status in ("completed", "rejected", "pending_approval"):
        return EXIT_OK
    # orders may have filled: a distinct code, so a script never re-runs the cycle as if nothing happened
    return EXIT_EXECUTED_WITH_ERRORS if status == EXECUTED_WITH_ERRORS else EXIT_FAILED


def cmd_run(args) -> int:
    from graph.runner import InputError, parse_symbols

    try:  # the flag's own syntax (a comma-separated list) is the CLI's; the kernel checks each symbol
        symbols = parse_symbols(args.symbols)
    except InputError as e:
        raise CliError(str(e)) from None
    return _cycle_command(args, "run_cycle", symbols=symbols, as_of=args.as_of, session_id=args.session,
                          approve=args.approve, memory=args.memory)


def cmd_approve(args) -> int:
    import getpass

    return _cycle_command(args, "approve", session_id=args.session_id, approved=not args.reject,
                          by=args.by or getpass.getuser())


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


def cmd_schemas(args) -> int:
    schemas = kernel_call(None, "contract_schemas", needs_store=False).schemas
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (out / f"{name}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {len(schemas)} JSON Schemas to {out}")
    return EXIT_OK


def cmd_features(args) -> int:
    from graph.kernel.transports.cli.render import print_bundle

    bundle = kernel_call(None, "features", needs_store=False, symbol=args.symbol.strip(), as_of=args.as_of, market=args.market)
    if args.json:
        print(bundle.model_dump_json())
    else:
        print_bundle(bundle)
    return EXIT_OK


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tradegraph", description="Auditable LLM trading-agent cycles on LangGraph")
    sub = p.add_subparsers(dest="command", required=True)

    def db(sp):
        sp.add_argument("--db", default=None, help="store URI: mongodb://…, mongomock://… (default: $MONGODB_URI, "
                                                   "else the embedded store under $TRADEGRAPH_HOME)")

    r = sub.add_parser("run", help="run one trading cycle")
    r.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    r.add_argument("--as-of", required=True, help="YYYY-MM-DD; only data on or before it is used")
    r.add_argument("--session", default=None, help="continue this session (its portfolio carries over)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument("--approve", action="store_true",
                   help="pause before EXECUTING until `tradegraph approve SESSION_ID [--reject]`")
    r.add_argument("--memory", default=None, choices=["on", "off", "session"],
                   help="past notes agents recall: on (all, known before --as-of; default, or $TRADEGRAPH_MEMORY), "
                        "session (this session's only), off")
    db(r)
    r.set_defaults(fn=cmd_run)

    a = sub.add_parser("approve", help="approve (or --reject) a session's cycle paused before EXECUTING")
    a.add_argument("session_id")
    a.add_argument("--reject", action="store_true")
    a.add_argument("--by", default=None, help="who decides (default: the OS user); audited")
    a.add_argument("--json", action="store_true")
    db(a)
    a.set_defaults(fn=cmd_approve)

    e = sub.add_parser("events", help="print a session's state_events as JSON lines, in seq order")
    e.add_argument("session_id")
    e.add_argument("--kind", default=None, choices=EVENT_KINDS)
    db(e)
    e.set_defaults(fn=cmd_events)

    s = sub.add_parser("sessions", help="list recent sessions")
    s.add_argument("--limit", type=int, default=20)
    db(s)
    s.set_defaults(fn=cmd_sessions)

    sc = sub.add_parser("schemas", help="write every contract's JSON Schema")
    sc.add_argument("--out", required=True)
    sc.set_defaults(fn=cmd_schemas)

    f = sub.add_parser("features", help="print a symbol's FeatureBundle at a date")
    f.add_argument("symbol")
    f.add_argument("--as-of", required=True)
    f.add_argument("--market", default="us_equity", choices=["us_equity", "cn_a_share", "crypto"],
                   help="the market whose calendar and close decide what is visible")
    f.add_argument("--json", action="store_true")
    f.set_defaults(fn=cmd_features)

    st = sub.add_parser("store", help="manage the embedded store (start keeps it running for later commands); "
                                      "recover redelivers spooled audit events and finishes half-done fills")
    st.add_argument("action", choices=["start", "stop", "status", "recover"])
    db(st)
    st.set_defaults(fn=cmd_store)

    from graph.kernel.transports.serve_cli import add_mcp_parser, add_serve_parser

    add_serve_parser(sub)
    add_mcp_parser(sub)
    for commands in (replay, backtest, memory):
        commands.register(sub)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    fn: Callable[[Any], int] = args.fn
    try:
        return fn(args)
    except CliError as e:
        print(f"tradegraph: error: {e}", file=sys.stderr)
        return e.code
    except StoreUnavailable as e:  # the store went away mid-command: one line naming it
        print(f"tradegraph: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_STORE
    except KeyboardInterrupt:
        print("tradegraph: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a crash is one line and a non-zero exit; the cycle's events hold the details
        if os.environ.get("TRADEGRAPH_DEBUG"):
            raise
        print(f"tradegraph: error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
