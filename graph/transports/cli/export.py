"""`tradegraph export otel SESSION`: a recorded session as OpenTelemetry GenAI spans, sent to an OTLP/HTTP
collector (Langfuse, Phoenix, Jaeger, Tempo, …) or drawn as a tree with --stdout. `tradegraph export head
SESSION`: the session's chain head (signed with TRADEGRAPH_AUDIT_KEY when set) as JSON, to notarise elsewhere.
Direct on the store, like `store`: they read the audit log and call no capability."""

from __future__ import annotations

import json
import re

from graph.services.telemetry.settings import ENDPOINT_VAR, TRACES_ENDPOINT_VAR, OtelConfigError, shown, traces_url
from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, add_db_flag, open_store


def register(sub) -> None:
    ex = sub.add_parser(
        "export",
        help="export a recorded session to other tools (otel: OpenTelemetry spans; head: its signed chain head)",
    )
    formats = ex.add_subparsers(dest="format", required=True)
    ot = formats.add_parser("otel", help="send a session's cycles as OpenTelemetry GenAI spans over OTLP/HTTP")
    ot.add_argument("session_id")
    ot.add_argument(
        "--endpoint",
        default=None,
        metavar="URL",
        help=f"OTLP/HTTP base URL (/v1/traces is appended unless present); default ${TRACES_ENDPOINT_VAR}"
        f" as is, else ${ENDPOINT_VAR}",
    )
    ot.add_argument("--cycle", default=None, metavar="ID", help="one cycle only: its id, or c<N> / <N>")
    ot.add_argument("--stdout", action="store_true", help="print the span tree (needs no collector)")
    add_db_flag(ot)
    ot.set_defaults(fn=cmd_export_otel)
    hd = formats.add_parser(
        "head",
        help="print a session's chain head (seq and hash of its last event, signed "
        "when TRADEGRAPH_AUDIT_KEY is set) as JSON, to keep outside the store",
    )
    hd.add_argument("session_id")
    add_db_flag(hd)
    hd.set_defaults(fn=cmd_export_head)


def cmd_export_head(args) -> int:
    """The head as stored, with the bytes its signature covers. A head that fails its signature under the
    configured key is refused (exit 1): notarising it would vouch for an edited head."""
    from database.heads import audit_key

    store = open_store(args.db)
    try:
        head = store.events.heads.get(args.session_id)
        known = head is not None or store.events.exists(args.session_id)
        unknown = None if known else store.admin_log.unknown_session(args.session_id)  # a deletion is named
    finally:
        store.close()
    if unknown is not None:
        raise CliError(unknown)
    if head is None:
        raise CliError(
            f"session '{args.session_id}' has no chain head (written before chain heads existed)", EXIT_FAILED
        )
    problem = head.signature_problem(audit_key())
    if problem is not None:
        raise CliError(f"session '{args.session_id}': {problem}", EXIT_FAILED)
    print(json.dumps(head.public()))
    return EXIT_OK


def cmd_export_otel(args) -> int:
    from graph.machine.runner import InputError
    from graph.services.telemetry.export import OtelExportFailed, counts, send, spans_of
    from graph.services.telemetry.tree import plain, render

    try:
        url = traces_url(args.endpoint)
    except OtelConfigError as e:
        raise CliError(str(e)) from None
    if url is None and not args.stdout:
        raise CliError(
            f"no OTLP endpoint: pass --endpoint URL or set {ENDPOINT_VAR} (or {TRACES_ENDPOINT_VAR}); "
            f"--stdout prints the spans instead"
        )
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
    print(
        f"{'exported' if url else 'built'} {len(spans)} spans of session {args.session_id} "
        f"({cycles} cycle{'s' if cycles != 1 else ''}): "
        + ", ".join(f"{v} {k}" for k, v in n.items())
        + (f" -> {shown(url)}" if url else "")
    )
    return EXIT_OK


def cycle_id(session_id: str, given: str | None) -> str | None:
    """`c2` and `2` name the session's second cycle; a full id is taken as it is."""
    if given is None:
        return None
    short = re.fullmatch(r"c?(\d+)", given.strip())
    return f"{session_id}:c{int(short.group(1))}" if short else given
