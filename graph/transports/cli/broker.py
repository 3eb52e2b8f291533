"""`tradegraph broker halt|resume|status|reconcile`: the kill switch and the broker's books against the ledger,
through the kernel's broker capabilities (the same ones HTTP and MCP serve)."""

from __future__ import annotations

import getpass
import time

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, _print_json, add_db_flag, kernel_call


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def cmd_halt(args) -> int:
    out = kernel_call(
        args.db, "broker_halt", by=args.by or getpass.getuser(), reason=args.reason, cancel_open=args.cancel_open
    )
    if args.json:
        _print_json(out.model_dump())
    else:
        print(
            f"broker halted by {out.by} at {_when(out.at)}: no order is submitted and no broker cycle approved "
            f"until `tradegraph broker resume`"
            + (f"; cancelled {len(out.cancelled)} open order(s)" if args.cancel_open else "")
        )
    return EXIT_OK


def cmd_resume(args) -> int:
    out = kernel_call(args.db, "broker_resume", by=args.by or getpass.getuser(), reason=args.reason)
    if args.json:
        _print_json(out.model_dump())
    else:
        print(f"broker resumed by {out.by} at {_when(out.at)}")
    return EXIT_OK


def cmd_status(args) -> int:
    out = kernel_call(args.db, "broker_status")
    if args.json:
        _print_json(out.model_dump())
        return EXIT_OK
    a = out.account
    halt = out.halt
    print(
        f"account {a['status']}: cash {a['cash']:,.2f}, buying power {a['buying_power']:,.2f}, "
        f"equity {a['equity']:,.2f}"
    )
    print(
        "halted by {} at {}".format(halt.get("by"), _when(halt.get("at") or 0)) if halt.get("halted") else "not halted"
    )
    for s, p in sorted(out.positions.items()):
        print(f"  position {s}: {p['quantity']:g} @ {p['avg_price']:g}")
    for o in out.open_orders:
        print(
            f"  open {o['side']} {o['quantity']:g} {o['symbol']} ({o['status']}, {o['filled_quantity']:g} filled) "
            f"{o['client_order_id']}"
        )
    return EXIT_OK


def cmd_reconcile(args) -> int:
    out = kernel_call(args.db, "broker_reconcile", session_id=args.session_id)
    if args.json:
        _print_json(out.model_dump())
    else:
        print(f"reconciled {out.orders} order(s) with {out.broker}: {len(out.updated)} updated, {len(out.drift)} drift")
        for u in out.updated:
            print(
                f"  late {u['symbol']} {u['client_order_id']}: {u['status']}, {u['filled_quantity']:g} filled"
                + (f" @ {u['avg_price']:g}" if u.get("avg_price") else "")
            )
        for d in out.drift:
            print(f"  drift {d.get('symbol') or ''}: {d['problem']}")
    # drift is not a crash: exit 1 so a script notices
    return EXIT_OK if out.clean else EXIT_FAILED


def register(sub) -> None:
    b = sub.add_parser("broker", help="the broker: halt, resume, status, reconcile")
    bs = b.add_subparsers(dest="broker_command", required=True)
    h = bs.add_parser("halt", help="kill switch: no order is submitted by any process until resumed")
    h.add_argument("--cancel-open", action="store_true", help="also cancel every open tradegraph order")
    h.add_argument("--reason", default="")
    h.add_argument("--by", default=None, help="who halts (default: the OS user); audited")
    h.set_defaults(fn=cmd_halt)
    r = bs.add_parser("resume", help="lift the halt")
    r.add_argument("--reason", default="")
    r.add_argument("--by", default=None, help="who resumes (default: the OS user); audited")
    r.set_defaults(fn=cmd_resume)
    s = bs.add_parser("status", help="account, positions, open orders, halt")
    s.set_defaults(fn=cmd_status)
    c = bs.add_parser("reconcile", help="the broker's orders, positions and cash against the ledger (drift: exit 1)")
    c.add_argument("session_id", nargs="?", default=None)
    c.set_defaults(fn=cmd_reconcile)
    for p in (h, r, s, c):
        p.add_argument("--json", action="store_true")
        add_db_flag(p)
