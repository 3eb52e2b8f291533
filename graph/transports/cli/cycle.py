"""`tradegraph run` and `tradegraph approve`: the run_cycle and approve capabilities and the approval screen."""

from __future__ import annotations

import sys
import threading

from graph.transports.cli.common import (
    EXIT_EXECUTED_WITH_ERRORS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STORE,
    CliError,
    _print_json,
    add_db_flag,
    kernel,
)
from graph.transports.cli.data import add_data_flags, data_inputs
from graph.transports.cli.foreground import Waited, close_under
from graph.transports.cli.spending import add_spending_flags, spending_inputs


def _cycle_command(args, capability: str, **inputs) -> int:
    """Shared shell of `run` and `approve`: the configuration checked first (a bad setting is exit 2, before any
    store is opened), the capability through the kernel, the approval screen."""
    from agent.brokers import BrokerConfigError
    from agent.brokers.settings import check_broker_env
    from agent.config import ConfigError, command_config
    from graph.transports.cli.render import print_cycle

    try:
        command_config(memory=getattr(args, "memory", None))
        if capability == "run_cycle":  # keys, URL and mandate checked before the store or any model
            check_broker_env(given=getattr(args, "broker", None))
    except (ConfigError, BrokerConfigError) as e:
        raise CliError(str(e)) from None
    out = _stoppable_call(args.db, capability, inputs)
    if args.json:
        _print_json(out.summary())
    else:
        print_cycle(out)
    if out.audit_error:  # the result above stands; its audit waits in the local spool
        print(f"tradegraph: error: {out.audit_error}", file=sys.stderr)
        return EXIT_STORE
    return cycle_exit_code(out.status)


def _stoppable_call(db, capability: str, inputs: dict):
    """The capability, its store calls and its store's close on a thread of their own, the main thread only
    waiting (foreground.py Waited): a Ctrl-C never lands inside a store call. It stops the cycle as the cycle enters
    its next state (graph/machine/interrupts.py), the state under way, EXECUTING's orders included, ending first;
    a cycle that ended meanwhile is reported as it ended. A second Ctrl-C closes the store under it."""
    from graph.machine import interrupts

    calling, stores, asked = Waited(), [], threading.Event()

    def call():
        with interrupts.stoppable(asked), kernel(db) as k:
            stores.append(k.store)
            if asked.is_set():  # a Ctrl-C while the store opened: nothing written, no cycle started
                raise KeyboardInterrupt
            return k.call(capability, inputs, transport="cli")

    try:
        return calling.run(call)
    except KeyboardInterrupt:
        if calling.done:  # it ended just as the Ctrl-C came: its own outcome, its error or its status, stands
            return calling.outcome()
        print(
            "tradegraph: stopping as the cycle enters its next state (the state under way ends first); "
            "Ctrl-C again stops at once",
            file=sys.stderr,
        )
        asked.set()
        try:
            return calling.outcome()
        except KeyboardInterrupt:
            if calling.done:  # the cycle's own stop, or a second Ctrl-C just after it ended: its outcome stands
                return calling.outcome()
            close_under(calling, stores)  # a second Ctrl-C
            raise


def cycle_exit_code(status: str) -> int:
    from graph.machine.nodes.common import EXECUTED_WITH_ERRORS

    if status in ("completed", "rejected", "pending_approval"):
        return EXIT_OK
    # orders may have filled: a distinct code, so a script never re-runs the cycle as if nothing happened
    return EXIT_EXECUTED_WITH_ERRORS if status == EXECUTED_WITH_ERRORS else EXIT_FAILED


def cmd_run(args) -> int:
    from graph.machine.runner import InputError, parse_symbols

    try:  # the flag's own syntax (a comma-separated list) is the CLI's; the kernel checks each symbol
        symbols = parse_symbols(args.symbols)
    except InputError as e:
        raise CliError(str(e)) from None
    return _cycle_command(
        args,
        "run_cycle",
        symbols=symbols,
        as_of=args.as_of,
        session_id=args.session,
        approve=args.approve,
        memory=args.memory,
        broker=args.broker,
        **spending_inputs(args),
        **data_inputs(args, continuing=args.session is not None),
    )


def cmd_approve(args) -> int:
    import getpass

    said = {"comment": args.comment} if args.comment else {}
    return _cycle_command(
        args, "approve", session_id=args.session_id, approved=not args.reject, by=args.by or getpass.getuser(), **said
    )


def register(sub) -> None:
    r = sub.add_parser("run", help="run one trading cycle")
    r.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    r.add_argument("--as-of", required=True, help="YYYY-MM-DD; only data on or before it is used")
    r.add_argument("--session", default=None, help="continue this session (its portfolio carries over)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument(
        "--approve", action="store_true", help="pause before EXECUTING until `tradegraph approve SESSION_ID [--reject]`"
    )
    r.add_argument(
        "--memory",
        default=None,
        choices=["on", "off", "session"],
        help="past notes agents recall: session (this session's only; default, or $TRADEGRAPH_MEMORY), "
        "on (every run's, known before --as-of), off",
    )
    r.add_argument(
        "--broker",
        default=None,
        choices=["sim", "alpaca"],
        help="where orders go: sim (the simulated book) or alpaca (paper; ALPACA_API_KEY, ALPACA_SECRET_KEY, "
        "ALPACA_BASE_URL); default $TRADEGRAPH_BROKER, else sim. See docs/brokers.md",
    )
    add_spending_flags(r, "cycle")
    add_data_flags(r)
    add_db_flag(r)
    r.set_defaults(fn=cmd_run)

    a = sub.add_parser("approve", help="approve (or --reject) a session's cycle paused before EXECUTING")
    a.add_argument("session_id")
    a.add_argument("--reject", action="store_true")
    a.add_argument("--by", default=None, help="who decides (default: the OS user); audited")
    a.add_argument("--comment", default=None, help="why, in your words (up to 500 characters); audited")
    a.add_argument("--json", action="store_true")
    add_db_flag(a)
    a.set_defaults(fn=cmd_approve)
