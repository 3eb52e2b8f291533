"""`tradegraph export otel SESSION`: a recorded session as OpenTelemetry GenAI spans, sent to an OTLP/HTTP
collector (Langfuse, Phoenix, Jaeger, Tempo, …) or drawn as a tree with --stdout. Direct on the store, like
`store`: it reads the audit log and calls no capability."""
from __future__ import annotations

import re

from graph.kernel.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, add_db_flag, open_store
from graph.telemetry.settings import ENDPOINT_VAR, TRACES_ENDPOINT_VAR, OtelConfigError, shown, traces_url


def register(sub) -> None:
    ex = sub.add_parser("export", help="export a recorded session to other tools (otel: OpenTelemetry spans)")
    formats = ex.add_subparsers(dest="format", required=True)
    ot = formats.add_parser("otel", help="send a session's cycles as OpenTelemetry GenAI spans over OTLP/HTTP")
    ot.add_argument("session_id")
    ot.add_argument("--endpoint", default=None, metavar="URL",
                    help=f"OTLP/HTTP base URL (/v1/traces is appended unless present); default ${TRACES_ENDPOINT_VAR}"
                         f" as is, else ${ENDPOINT_VAR}")
    ot.add_argument("--cycle", default=None, metavar="ID", help="one cycle only: its id, or c<N> / <N>")
    ot.add_argument("--stdout", action="store_true", help="print the span tree (needs no collector)")
    add_db_flag(ot)
    ot.set_defaults(fn=cmd_export_otel)


def cmd_export_otel(args) -> int:
    from graph.runner import InputError
    from graph.telemetry.export import OtelExportFailed, counts, send, spans_of
    from graph.telemetry.tree import plain, render

    try:
        url = traces_url(args.endpoint)
    except OtelConfigError as e:
        raise CliError(str(e)) from None
    if url is None and not args.stdout:
        raise CliError(f"no OTLP endpoint: pass --endpoint URL or set {ENDPOINT_VAR} (or {TRACES_ENDPOINT_VAR}); "
                       f"--stdout prints the spans instead")
    store = open_store(args.db)
    try:
        spans = spans_of(store, args.session_id, cycle_id(args.session_id, args.cycle))
    except InputError as e:
        raise CliError(str(e)) from None
    finally:
        store.close()
    if args.stdout:
        print(render([plain(s) for s in spans]))
    if url is not None:
        try:
            send(spans, url)
        except OtelExportFailed as e:
            raise CliError(str(e), EXIT_FAILED) from None
    n = counts(spans)
    cycles = n["invoke_agent"]
    print(f"{'exported' if url else 'built'} {len(spans)} spans of session {args.session_id} "
          f"({cycles} cycle{'s' if cycles != 1 else ''}): " + ", ".join(f"{v} {k}" for k, v in n.items())
          + (f" -> {shown(url)}" if url else ""))
    return EXIT_OK


def cycle_id(session_id: str, given: str | None) -> str | None:
    """`c2` and `2` name the session's second cycle; a full id is taken as it is."""
    if given is None:
        return None
    short = re.fullmatch(r"c?(\d+)", given.strip())
    return f"{session_id}:c{int(short.group(1))}" if short else given
