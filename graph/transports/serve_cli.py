"""`tradegraph serve` and `tradegraph mcp`: parsers and mains for graph/transports/cli/main.py to hook in, also runnable
alone (`python -m graph.transports.serve_cli serve|mcp …`). A refused start is one line and exit 2
(policy) or 3 (store), like every other command."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Optional

from graph.kernel.errors import KernelError, exit_code
from graph.kernel.policy import PolicyError
from graph.transports.cli.common import add_db_flag
from graph.transports.gc_tuning import collect_garbage_less_often

EXIT_POLICY = 2  # a refused start: bad input (a policy, a port), never the store's code
UVICORN_STARTUP_FAILURE = 3  # uvicorn.server's exit code when it can't bind or its startup fails


class BadFlag(ValueError):
    """A flag of `serve` or `mcp` that can't be used (a port out of range or taken); the message names it."""


def port_number(flag: str, raw: str) -> int:
    """A port as given: 1..65535. 0 would listen on whatever port the system picks, which nobody named."""
    try:
        port = int(raw)
    except ValueError:
        raise BadFlag(f"{flag} {raw!r} is not a port number (1..65535)") from None
    if not 1 <= port <= 65535:
        raise BadFlag(f"{flag} {raw} is outside 1..65535")
    return port


def check_port_free(flag: str, host: str, port: int) -> None:
    """Bind the address as uvicorn will (SO_REUSEADDR) and let it go: a port another process listens on is refused
    here, in one line, before the store is opened."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise BadFlag(f"{flag} {port}: can't listen on {host}:{port}: {e.strerror or e}") from None


def listening(flag: str, host: str, port: int, run) -> NoReturn:
    """run() serves on host:port until it is stopped, then the process ends (end_process). uvicorn's own failure to
    start (the port taken between the check and its bind) exits 3, the store's code: it becomes a BadFlag naming the
    address instead."""
    try:
        run()
        code = 0
    except SystemExit as e:
        if e.code == UVICORN_STARTUP_FAILURE:
            raise BadFlag(
                f"{flag} {port}: the server did not start on {host}:{port} (the line above says why)"
            ) from None
        code = e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt:
        code = 130
    end_process(code)


def end_process(code: int) -> NoReturn:
    """The server has stopped and closed its store: end the process now. What would still hold it are requests the
    shutdown grace cut off (graph/transports/http.py SHUTDOWN_GRACE_S), each in a worker thread the
    interpreter would join, for as long as they wait on a store that is gone (5 s of server selection, 30 s on a
    hung socket), and the interpreter's collection of the whole heap (a second or more). The exit handlers run
    first (an embedded server this process started is stopped), as on any exit."""
    import atexit
    import os

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _reconnecting(db):
    from graph.transports.reconnecting import ReconnectingKernel  # the machine loads only when a server starts

    return ReconnectingKernel.open(db)


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="serve the HTTP API (OpenAPI at /openapi.json)")
    p.add_argument(
        "--host", default="127.0.0.1", help="bind address (default loopback; any other needs TRADEGRAPH_API_TOKEN)"
    )
    p.add_argument("--port", default="8000", help="1..65535 (default 8000)")
    add_db_flag(p)
    p.set_defaults(fn=serve_main)
    return p


def add_mcp_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("mcp", help="serve the MCP tools over stdio (default) or streamable HTTP")
    _mcp_flags(p)
    p.set_defaults(fn=mcp_main)
    return p


def _mcp_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", default=None, metavar="PORT", help="streamable HTTP on this port (1..65535), at /mcp")
    p.add_argument("--host", default="127.0.0.1", help="with --http: bind address (non-loopback needs a token)")
    add_db_flag(p)


def register(subparsers) -> None:
    """`serve` and `mcp`, for the tradegraph command line (cli/main.py COMMANDS) and for running alone."""
    add_serve_parser(subparsers)
    add_mcp_parser(subparsers)


def startup_error() -> Optional[str]:
    """Every environment variable tradegraph reads, checked before a command does anything (agent/config.py
    check_environment, with the store's and the execution policy's checks): the one line saying which variable
    and value are wrong, or None."""
    from agent.brokers.settings import check_broker_startup
    from agent.config import ConfigError, check_environment
    from database.connection import check_store_uri_env
    from graph.kernel.policy import allowed_host_names, allowed_transports, data_dirs, deleting_transports
    from graph.kernel.runs import check_runs_dir_env
    from graph.services.telemetry.settings import traces_url
    from graph.transports.cli.data import check_config_file

    try:
        check_environment(
            also=(
                check_store_uri_env,
                allowed_transports,
                deleting_transports,
                data_dirs,
                allowed_host_names,
                check_runs_dir_env,
                check_config_file,
                lambda env: traces_url(env=env),
                check_broker_startup,
            )
        )
    except ConfigError as e:
        return str(e)
    return None


def _guarded(run) -> int:
    problem = startup_error()  # `python -m …serve_cli` and `…mcp` start here without the CLI's main
    if problem:
        print(f"tradegraph: error: {problem}", file=sys.stderr)
        return EXIT_POLICY
    try:
        run()
    except (PolicyError, BadFlag) as e:
        print(f"tradegraph: error: {e}", file=sys.stderr)
        return EXIT_POLICY
    except KernelError as e:
        print(f"tradegraph: error: {e.message}", file=sys.stderr)
        return exit_code(e)
    return 0


def serve_main(args) -> int:
    from graph.kernel.policy import Policy, check_bind
    from graph.transports.http import TRANSPORT, serve

    def run() -> None:
        port = port_number("--port", args.port)
        check_bind(args.host, Policy.for_transport(TRANSPORT))  # a refused bind opens no store
        check_port_free("--port", args.host, port)
        listening("--port", args.host, port, lambda: serve(args.host, port, kernel=_reconnecting(args.db)))

    return _guarded(run)


def mcp_main(args) -> int:
    from graph.transports import mcp

    if args.http is None:
        return _guarded(lambda: mcp.run_stdio(args.db))

    def run() -> None:
        from graph.kernel.policy import Policy, check_bind

        check_bind(args.host, Policy.for_transport(mcp.TRANSPORT))  # the policy's refusal first, as for serve
        port = port_number("--http", args.http)
        check_port_free("--http", args.host, port)
        listening("--http", args.host, port, lambda: mcp.run_http(port, host=args.host, db=args.db))

    return _guarded(run)


def standalone_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    if only == "mcp":
        p = argparse.ArgumentParser(prog="python -m graph.transports.mcp")
        _mcp_flags(p)
        return p
    p = argparse.ArgumentParser(prog="python -m graph.transports.serve_cli")
    register(p.add_subparsers(dest="command", required=True))
    return p


def main(argv: Optional[list[str]] = None) -> int:
    collect_garbage_less_often()
    args = standalone_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
