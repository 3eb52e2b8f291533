"""`tradegraph replay SESSION_ID`: a recorded session as tables, JSON or one HTML page, with its hash
chain checked; `--verify` re-executes it from the recording and exits 1 on the first divergence or a
broken chain; `--check-chain` prints the chain's verdict alone. All through the kernel (`replay`, `verify`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, kernel_call, writable_file

if TYPE_CHECKING:  # rich is imported where something is printed: building the parser (every command) needs none
    from rich.console import Console


def register(subparsers) -> None:
    r = subparsers.add_parser(
        "replay",
        help="reconstruct a recorded session (tables, --json, --html) or "
        "--verify it by re-executing it from the recording",
    )
    r.add_argument("session_id")
    out = r.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the reconstructed session as one JSON object")
    out.add_argument("--html", metavar="FILE", default=None, help="write one self-contained HTML page")
    out.add_argument(
        "--verify",
        action="store_true",
        help="re-run every cycle through the graph with recorded answers; exit 1 on divergence",
    )
    out.add_argument(
        "--check-chain",
        action="store_true",
        help="verify the session's hash chain (tamper evidence); exit 1 naming the first broken seq",
    )
    r.add_argument("--db", default=None, help="store URI (default: $MONGODB_URI, else the embedded store)")
    r.set_defaults(fn=cmd_replay)


def cmd_replay(args) -> int:
    """The `replay` capability for tables, --json, --html and --check-chain (its chain is the one checked with
    the session); the `verify` capability for --verify."""
    writable_file("--html", args.html)  # before the session is read: a page that can't be written is bad input
    if args.verify:
        report = kernel_call(args.db, "verify", session_id=args.session_id).report()
        _print_verify(report)
        return EXIT_OK if report.ok else EXIT_FAILED
    out = kernel_call(args.db, "replay", session_id=args.session_id)
    if args.check_chain:
        return _print_chain(args.session_id, out.chain)
    if args.json:
        print(json.dumps(out.model_dump(), default=str))
        return EXIT_OK
    session = out.session()
    if args.html:
        from graph.services.replay.html import render_html

        Path(args.html).write_text(render_html(session), encoding="utf-8")
        print(f"wrote {args.html} ({session.events} events, {len(session.cycles)} cycle(s))")
    else:
        print_session(session)
    return EXIT_OK


def _print_chain(session_id: str, chain: dict) -> int:
    """One line either way: intact, with how the log stands against its chain head; or the first broken or
    missing seq (database/events.py verify_chain)."""
    if chain["ok"]:
        print(f"hash chain intact: {chain['checked']} event(s) of session {session_id}" + _head_note(chain))
        return EXIT_OK
    broken = chain["first_broken"]
    print(
        f"tradegraph: error: hash chain of session {session_id} broken at seq {broken['seq']}: {broken['reason']}",
        file=sys.stderr,
    )
    return EXIT_FAILED


def _head_note(chain: dict) -> str:
    return f"; {chain['head_note']}" if chain.get("head_note") else ""


def recorded_spend(cycle) -> dict:
    """A recorded cycle's tokens and dollars by state, from each response's recorded usage and model. Each
    llm_response also records the cost_usd it was charged at when it ran."""
    from agent.pricing import Spend, cost_of, price_of

    spend = Spend()
    for x in cycle.llm_calls:
        if x.answered:
            spend.add(x.state, x.usage or {}, cost_of(x.usage or {}, price_of(x.model)[1]))
    return spend.as_dict()


def _console() -> Console:
    from rich.console import Console

    return Console(width=120, highlight=False)


def print_session(session, console: Console | None = None) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = console or _console()
    c.print(
        f"[bold]session[/bold] {session.session_id}  events: {session.events}  cycles: {len(session.cycles)}"
        + (f"  replay of: {session.replay_of}" if session.replay_of else "")
    )
    for w in session.warnings():
        c.print("[bold red]WARNING[/bold red] " + escape(w))
    if session.gap_free:
        c.print(f"seq 1..{session.events}: gap-free")
    if session.chain is not None and session.chain["ok"]:
        c.print(escape(f"hash chain: intact ({session.chain['checked']} events)" + _head_note(session.chain)))
    # a status read from a log that fails its chain is what the log says now, not what the runner recorded
    doubt = " [red](hash chain broken: not vouched for)[/red]" if session.chain and not session.chain["ok"] else ""
    for cy in session.cycles:
        c.print()
        c.print(
            f"[bold]cycle {cy.index}[/bold] {cy.cycle_id}  status: [bold]{cy.status}[/bold]{doubt}  "
            f"seq {cy.first_seq}..{cy.last_seq}  tokens: {cy.tokens['total_tokens']}"
        )
        c.print(
            "path: "
            + " → ".join(["START"] + [t["to"] for t in cy.transitions if t["to"]])
            + (" ⏸ waiting for approval" if cy.paused else "")
        )
        if cy.manifest:
            from graph.machine.manifest import summary_line

            c.print("ran with: " + escape(summary_line(cy.manifest)))
        t = Table(title="states")
        for col in ("state", "contract", "LLM calls", "tokens", "tool calls", "validations (ok/fail)", "errors"):
            t.add_column(col)
        for s in cy.states:
            llm = [x for x in cy.llm_calls if x.state == s]
            val = [v for v in cy.validations if v["state"] == s]
            contract = cy.contracts.get(s)
            t.add_row(
                s,
                contract["name"] if contract else "—",
                str(len(llm)),
                str(sum(int(x.usage.get("total_tokens", 0) or 0) for x in llm)),
                str(sum(1 for x in cy.tool_calls if x.state == s)),
                f"{sum(bool(v.get('ok')) for v in val)}/{sum(not v.get('ok') for v in val)}",
                str(sum(1 for e in cy.errors if e["state"] == s)),
            )
        c.print(t)
        if cy.llm_calls:
            from graph.transports.cli.render import spend_table  # pricing loads the models' code: only here

            c.print(spend_table(recorded_spend(cy), "LLM spend by state (priced at today's price table)"))
            lt = Table(title="LLM calls")
            for col in ("seq", "state", "model", "asks", "answer", "tokens in/out", "latency ms"):
                lt.add_column(col)
            for x in cy.llm_calls:
                asks = x.structured_output or (("tools: " + ",".join(x.tools)) if x.tools else "prose")
                if not x.answered:
                    answer = "[red]NO RESPONSE RECORDED[/red]"
                elif x.error:
                    answer = f"[red]{escape(x.error[:50])}[/red]"
                elif x.tool_calls:
                    answer = "calls " + ",".join(tc.get("name", "?") for tc in x.tool_calls)
                else:
                    answer = escape(str(x.text)[:50])
                lt.add_row(
                    str(x.seq),
                    x.state,
                    x.model or "?",
                    asks,
                    answer,
                    f"{x.usage.get('input_tokens', '?')}/{x.usage.get('output_tokens', '?')}",
                    f"{x.latency_ms:.1f}" if x.latency_ms is not None else "—",
                )
            c.print(lt)
        if cy.tool_calls:
            tt = Table(title="tool calls")
            for col in ("seq", "state", "tool", "args", "result"):
                tt.add_column(col)
            for x in cy.tool_calls:
                res = (
                    f"[red]{escape(x.error)}[/red]"
                    if x.error
                    else ("[red]NO RESULT[/red]" if not x.answered else escape(json.dumps(x.result, default=str)[:50]))
                )
                tt.add_row(str(x.seq), x.state, x.name, escape(json.dumps(x.args, default=str)[:40]), res)
            c.print(tt)
        if cy.trades:
            tr = Table(title="executed trades")
            for col in ("symbol", "side", "quantity", "price", "fees", "date", "reason"):
                tr.add_column(col)
            for x in cy.trades:
                tr.add_row(
                    str(x.get("symbol")),
                    str(x.get("side")),
                    f"{x.get('quantity', 0):g}",
                    str(x.get("price")),
                    "—" if x.get("fees") is None else str(x.get("fees")),
                    str(x.get("date")),
                    str(x.get("reason") or ("entry" if x.get("side") == "BUY" else "")),
                )
            c.print(tr)
        else:
            c.print("executed trades: none")
        if cy.retrievals:
            c.print(
                f"past notes: {sum(bool(r.get('hits')) for r in cy.retrievals)} of {len(cy.retrievals)} agent "
                f"prompt(s) received notes"
            )
            from graph.transports.cli.render import notes_table

            notes_table(cy.retrievals, c)
        for e in cy.errors:
            c.print(
                f"[red]error[/red] seq {e['seq']} {e['state']}: {e.get('type')}: "
                + escape(str(e.get("message") or e.get("reason") or e.get("error") or ""))
            )


def _print_verify(report, console: Console | None = None) -> None:
    from rich.markup import escape

    c = console or _console()
    c.print(f"[bold]verify[/bold] {report.session_id} → replayed as {report.replay_session_id}")
    for w in report.warnings:
        c.print("[bold red]WARNING[/bold red] " + escape(w))
    for v in report.cycles:
        if v.skipped:
            mark = "[yellow]SKIPPED[/yellow]"
        else:
            mark = "[green]IDENTICAL[/green]" if v.identical else "[red]DIVERGED[/red]"
        c.print(f"cycle {v.cycle_id}: {mark}  ({len(v.compared_states)} state(s) compared)")
        for n in v.notes:
            c.print("  note: " + escape(n))
        if v.config_differences:
            c.print(
                f"  [yellow]today differs from the recorded manifest in {len(v.config_differences)} place(s); "
                f"the replay used the recorded configuration and answers (a data file that changed was not read)"
                f"[/yellow]"
            )
        for d in v.config_differences:
            c.print("    " + escape(d))
    if report.chain is not None and report.chain["ok"]:
        c.print(escape(f"hash chain: intact ({report.chain['checked']} events)" + _head_note(report.chain)))
    for line in report.unreadable:
        c.print("[bold red]UNREADABLE[/bold red] " + escape(line))
    first = report.first_divergence
    if report.unreadable:
        c.print(
            f"[bold red]{len(report.unreadable)} event(s) are not events this code knows: nothing was "
            f"re-executed; not verified[/bold red]"
        )
    elif first is None and not report.ok:
        c.print("[bold red]contracts replay identical, but the recording fails its hash chain: not verified[/bold red]")
    elif first is None:
        c.print("[bold green]replay identical to the recording[/bold green]")
    else:
        c.print("[bold red]first divergence[/bold red]")
        c.print(f"  cycle:    {first.cycle_id}")
        c.print(f"  state:    {first.state}")
        c.print(f"  field:    {first.path or '<whole contract>'}")
        from graph.services.replay.session import _short

        c.print("  recorded: " + escape(_short(first.recorded, 300)))
        c.print("  replayed: " + escape(_short(first.replayed, 300)))
