"""`tradegraph benchmark stockbench`: the kernel's benchmark task (graph/services/benchmark/stockbench/), started and followed
in the foreground with a progress bar (decision points over every run: date, equity, ETA), then the scorecard; or,
with --estimate, the projected calls, tokens and dollars of the same benchmark without sending a request.

Ctrl-C cancels after the current decision point (exit 130): the same command (same --benchmark-id) resumes it. A
run with failed decision points, or a look-ahead leak, exits 1 and says so (--allow-failures N accepts up to N
failed points)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any, Optional

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError


def inputs(args) -> dict[str, Any]:
    """The flags as the kernel's BenchmarkInput fields, each bad one named as a flag before a store is opened."""
    from agent.data.market import DataError, parse_date
    from graph.kernel.models import BenchmarkId
    from graph.machine.runner import InputError, parse_symbols
    from graph.transports.cli.backtest import check_id_flag
    from graph.transports.cli.spending import spending_inputs

    out: dict[str, Any] = {"memory": args.memory, "workers": args.workers, **spending_inputs(args)}
    if args.workers < 1:
        raise CliError(f"--workers {args.workers} must be at least 1")
    if args.runs is not None:
        if not 1 <= args.runs <= 10:
            raise CliError(f"--runs {args.runs} must be from 1 to 10")
        out["runs"] = args.runs
    if args.temperature is not None:
        if not 0 <= args.temperature <= 2:
            raise CliError(f"--temperature {args.temperature:g} must be from 0 to 2")
        out["temperature"] = args.temperature
    if args.symbols is not None:
        try:
            out["symbols"] = parse_symbols(args.symbols)
        except InputError as e:
            raise CliError(f"--symbols: {e}") from None
    for name in ("start", "end"):
        value = getattr(args, name)
        if value is not None:
            try:
                parse_date(value)
            except DataError as e:
                raise CliError(f"--{name}: {e}") from None
            out[name] = value
    if args.model:
        out["models"] = []
        for spec in args.model:
            quick, _, deep = spec.partition("/")
            if not quick.strip() or (_ and not deep.strip()):
                raise CliError(f"--model {spec!r}: expected provider:model or QUICK/DEEP")
            out["models"].append({"quick": quick.strip(), **({"deep": deep.strip()} if deep else {})})
    if args.data is not None:
        out["data"] = str(Path(args.data).expanduser().resolve())
    if not args.estimate:
        out["benchmark_id"] = args.benchmark_id if args.benchmark_id is not None else f"sb-{uuid.uuid4().hex[:8]}"
        check_id_flag(BenchmarkId, out["benchmark_id"], "--benchmark-id")  # before it is joined to --out
    return out


def cmd_benchmark(args) -> int:
    if args.allow_failures < 0:
        raise CliError(f"--allow-failures {args.allow_failures} must be non-negative")
    given = inputs(args)
    if args.estimate:
        return _estimate(args, given)
    card = _run(args, given)
    if args.json:
        print(json.dumps(card, default=str))
    else:
        render(_console(), card, Path(args.out) / card["benchmark_id"])
    return verdict(card, args.allow_failures)


def verdict(card: dict[str, Any], allowed: int) -> int:
    """Exit 1, with one line, when a run had failed decision points (beyond --allow-failures) or a look-ahead leak:
    such a scorecard must never pass for clean."""
    runs = [r for r in card["rows"] if r["kind"] == "run"]
    failed = sum(int(r.get("failed_points") or 0) for r in runs)
    leaks = int((card.get("lookahead") or {}).get("leaks") or 0)
    code = EXIT_OK
    if failed > allowed:
        worst = max(runs, key=lambda r: int(r.get("failed_points") or 0))
        print(
            f"tradegraph: error: {failed} decision point(s) failed (allowed: {allowed}); {worst['name']} "
            f"({worst['session_ids'][0]}) lost {worst['failed_points']}: its figures cover the points it decided "
            f"only",
            file=sys.stderr,
        )
        code = EXIT_FAILED
    if leaks:
        print(
            f"tradegraph: error: the look-ahead audit found {leaks} piece(s) of evidence dated after their "
            f"cycle's decision time (tradegraph audit lookahead {card['benchmark_id']})",
            file=sys.stderr,
        )
        code = EXIT_FAILED
    return code


def _run(args, given: dict[str, Any]) -> dict[str, Any]:
    """The kernel's benchmark task, waited for (graph/transports/cli/foreground.py); returns its scorecard."""
    from graph.transports.cli.common import kernel
    from graph.transports.cli.foreground import wait_for

    with kernel(args.db, experiments_dir=args.out) as k:
        task, _ = wait_for(
            k, "start_benchmark", given, args, what="benchmark", resume=lambda t: f"--benchmark-id {t.run_id}"
        )
        arts = k.call("task_artifacts", {"task_id": task.task_id}, transport="cli")
    return (arts.metrics or {})["scorecard"]


def _estimate(args, given: dict[str, Any]) -> int:
    from graph.transports.cli.common import kernel

    with kernel(args.db) as k:
        est = k.call("estimate_benchmark", given, transport="cli")
    if args.json:
        print(est.model_dump_json())
        return EXIT_OK
    from rich.table import Table

    c = _console()
    w = est.window
    t = Table(
        title=f"StockBench estimate: {len(est.symbols)} symbols × {w['sessions']} sessions ({w['start']}..{w['end']})"
    )
    for col in (
        "configuration",
        "runs",
        "calls",
        "input tokens",
        "output tokens",
        "worst output",
        "dollars",
        "worst $",
    ):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for r in est.configurations:
        t.add_row(
            r.name,
            str(r.runs),
            f"{r.calls:,}",
            f"{r.input_tokens:,}",
            f"{r.output_tokens:,}",
            f"{r.output_tokens_worst:,}",
            _usd(r.usd, r.unpriced),
            _usd(r.usd_worst, r.unpriced),
        )
    c.print(t)
    per = est.per_point
    c.print(
        f"per decision point: {per['calls']:g} calls, {per['input_tokens']:,.0f} input tokens "
        f"({est.prompt_tokens_per_symbol_decision:,.0f} per symbol), {per['output_tokens']:,.0f} output tokens; "
        + ", ".join(f"{s} {b['calls']:g}" for s, b in per["by_state"].items())
    )
    c.print(f"how: {est.method}")
    c.print(f"tokens: {est.tokenizer}")
    c.print(f"output: {est.output_assumption}")
    return EXIT_OK


def _console():
    """A terminal's own width; piped or logged, wide enough for the table (rich would wrap it at 80)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=150)


def _usd(v: Optional[float], unpriced: list[str]) -> str:
    return f"${v:,.4f}" if v is not None else f"unknown ({', '.join(unpriced)} unpriced)"


def _pct(v: Optional[float], digits: int = 2) -> str:
    return "—" if v is None else f"{v * 100:+.{digits}f}%"


def render(c, card: dict[str, Any], folder: Path) -> None:
    """One table (runs, the buy-and-hold on this data, the published rows as published), then what departs from
    the paper, where the published rows come from, the time it took and the look-ahead audit."""
    from rich.table import Table

    w = card["window"]
    t = Table(
        title=f"StockBench {w['start']}..{w['end']}: {w['sessions']} sessions, {len(card['symbols'])} "
        f"symbols — benchmark {card['benchmark_id']}",
        caption="return and drawdown against the starting "
        "cash (buy-and-hold: its first point); Sortino daily as StockBench computes it; Sharpe annualised",
    )
    for col in (
        "",
        "return",
        "max DD",
        "Sortino",
        "Sharpe",
        "turnover",
        "trades",
        "fees",
        "LLM calls",
        "tokens",
        "dollars",
    ):
        t.add_column(col, justify="left" if not col else "right", no_wrap=bool(col))
    for r in card["rows"]:
        published = r["kind"] == "published"
        name = r["name"] + (" [dim](published)[/]" if published and "published" not in r["name"] else "")
        if r.get("failed_points"):
            name += f" [bold red]{r['failed_points']} FAILED point(s)[/]"
        if r.get("may_have_seen_window"):
            name += " [bold yellow]may have seen this window[/]"
        if r["kind"] == "run_mean":  # a configuration's runs: mean ± standard deviation, its runs' rows above
            t.add_row(name, *_mean_std(r), *["—"] * 7)
            continue
        digits = 1 if published else 2  # a published row as published: to its own digits
        t.add_row(
            name,
            _pct(r["cumulative_return"], digits),
            _pct(r["max_drawdown"], digits),
            "—" if r.get("sortino") is None else f"{r['sortino']:.4f}",
            "—" if r.get("sharpe") is None else f"{r['sharpe']:.2f}",
            "—" if r.get("turnover") is None else f"{r['turnover']:.2f}",
            "—" if published else str(r.get("trades")),
            "—" if r.get("fees") is None else f"{r['fees']:,.2f}",
            "—" if published else f"{r.get('llm_calls') or 0:,}",
            "—" if published else f"{r.get('tokens') or 0:,}",
            "—" if published else ("unknown" if r.get("usd") is None else f"${r['usd']:.4f}"),
        )
    c.print(t)
    rigour(c, card)
    for r in card["rows"]:
        for sid, head in zip(r.get("session_ids") or [], r.get("chain_heads") or []):
            where = f"chain head seq {head['seq']} hash {head['hash']}" if head else "no chain head"
            c.print(f"{r['name']}: session {sid}, {where}")
    c.print("[bold]departures from the paper's protocol[/]")
    for line in card["departures"]:
        c.print(f"  - {line}")
    c.print(f"[bold]published rows[/]: {card['published_source']}. {card['published_caveat']}")
    la = card.get("lookahead") or {}
    checked = ", ".join(f"{n:,} {k}" for k, n in (la.get("checked") or {}).items())
    if la.get("leaks"):
        c.print(
            f"[bold red]look-ahead audit: {la['leaks']} leak(s)[/] in {la.get('cycles')} cycles ({checked} "
            f"checked); first: {la['leak_lines'][0]}"
        )
    else:
        c.print(
            f"look-ahead audit: 0 leaks in {la.get('cycles')} cycles ({checked} checked)"
            + (f"; {len(la['unaudited'])} cycle(s) unaudited" if la.get("unaudited") else "")
        )
    if card.get("elapsed_s") is not None:
        c.print(f"elapsed: {card['elapsed_s']:.1f} s (this invocation's runs and scoring)")
    c.print(
        f"files: {folder}/scorecard.json, scorecard.csv, scorecard.png; verify a run with "
        f"`tradegraph replay SESSION --verify`"
    )


def _mean_std(r: dict[str, Any]) -> list[str]:
    def pm(k: str, fmt) -> str:
        return "—" if r.get(k) is None else f"{fmt(r[k])} ± {fmt(abs(r[f'{k}_std'] or 0.0))}"

    return [
        pm("cumulative_return", lambda v: f"{v * 100:.2f}%"),
        pm("max_drawdown", lambda v: f"{v * 100:.2f}%"),
        pm("sortino", lambda v: f"{v:.4f}"),
    ]


def rigour(c, card: dict[str, Any]) -> None:
    """Under the table: how many runs each row is (n=1 has no spread), each run's paired test against the
    buy-and-hold, the sub-periods, and what a row's model may have seen."""
    runs = [r for r in card["rows"] if r["kind"] == "run"]
    means = [r for r in card["rows"] if r["kind"] == "run_mean"]
    if runs and not means:
        temps = {r.get("temperature") for r in runs}
        c.print(
            "runs: n=1 per configuration, no standard deviation"
            + (" (the offline model is deterministic: another run is the same run)" if temps == {None} else "")
        )
    for m in means:
        c.print(f"{m['name']}: n={m['runs']}, mean ± sample standard deviation of its runs' rows above")
    for r in runs:
        test = r.get("vs_buy_and_hold") or {}
        if test and test.get("p_value") is None:
            c.print(f"{r['name']} vs buy-and-hold: {test.get('method') or 'no test'}")
        elif test.get("mean") is not None:
            lo, hi = test["ci95"]
            c.print(
                f"{r['name']} vs buy-and-hold: daily excess return mean {test['mean'] * 100:+.4f}%, 95% "
                f"bootstrap interval [{lo * 100:+.3f}%, {hi * 100:+.3f}%], p = {test['p_value']:.2f} "
                f"({test['sessions']} sessions)"
            )
    for r in card["rows"]:
        for period, f in (r.get("sub_periods") or {}).items():
            if f:
                c.print(
                    f"{r['name']}, {period} {f['start']}..{f['end']}: return {_pct(f['cumulative_return'])}, max "
                    f"DD {_pct(f['max_drawdown'])}, Sortino {f['sortino']:.4f}"
                )
    for r in runs:
        seen = r.get("may_have_seen_window")
        cut = ", ".join(
            (f"{x['model']} {x['cutoff'] or 'none'}" + ("" if x.get("verified") else " (source unverified)"))
            if x["known"]
            else f"{x['model']} unknown"
            for x in r.get("cutoffs") or []
        )
        if seen or seen is None:
            c.print(
                f"{r['name']}: "
                + (
                    "[bold yellow]may have seen this window[/]"
                    if seen
                    else "training cut-off unknown: it cannot be ruled out that it saw this window"
                )
                + f" (cut-offs: {cut}; graph/services/benchmark/stockbench/cutoffs.json)"
            )
    sent = sorted({str(r["temperature"]) for r in runs if r.get("temperature") is not None})
    if sent:
        c.print(f"temperature sent to the providers' models: {', '.join(sent)} (recorded in each run's manifest)")


def register(subparsers) -> None:
    from graph.transports.cli.common import add_db_flag, add_runs_flag
    from graph.transports.cli.spending import add_spending_flags

    b = subparsers.add_parser("benchmark", help="run a published benchmark and score it beside its published rows")
    sub = b.add_subparsers(dest="benchmark", required=True)
    s = sub.add_parser(
        "stockbench",
        help="StockBench (arXiv 2510.02209): 20 DJIA stocks, 2025-03..06, at the open",
        description="The paper's protocol by default: 20 symbols, 2025-03-01..2025-06-30, 100,000 "
        "cash, long-only, decide, fill and mark at the open, commission 1 bp, slippage "
        "2 bp. One backtest per model configuration, then the scorecard (docs/stockbench.md).",
    )
    s.add_argument(
        "--model",
        action="append",
        metavar="QUICK[/DEEP]",
        help="a model configuration, provider:model; repeat for several (default: the configured tiers, "
        "offline without a key)",
    )
    s.add_argument("--symbols", default=None, help="comma-separated (default: StockBench's 20)")
    s.add_argument("--start", default=None, help="YYYY-MM-DD (default 2025-03-01)")
    s.add_argument("--end", default=None, help="YYYY-MM-DD (default 2025-06-30)")
    s.add_argument(
        "--memory",
        default="session",
        choices=["on", "off", "session"],
        help="past notes agents recall (default session: each run's own)",
    )
    s.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="a StockBench tree (a checkout, its storage/ or an archive; default: the shipped archive)",
    )
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        help="runs at once; more than 1 spreads the configurations on Ray (the sweep extra)",
    )
    s.add_argument(
        "--runs",
        type=int,
        default=None,
        metavar="N",
        help="runs per model configuration, each a session of its own; the row shows their mean and "
        "standard deviation beside each run (default: 3 when a provider's model answers, 1 for the "
        "offline model, which is deterministic)",
    )
    s.add_argument(
        "--temperature",
        type=float,
        default=None,
        metavar="T",
        help="the sampling temperature a provider's model is sent (default: the paper's 0.7; another is "
        "printed as a departure)",
    )
    s.add_argument("--benchmark-id", default=None, help="resume this benchmark if <runs folder>/<id>/ exists")
    add_runs_flag(s)
    s.add_argument(
        "--estimate",
        action="store_true",
        help="print the projected calls, tokens and dollars instead, from a dry run: no request is sent",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object (the scorecard, or the estimate)")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument(
        "--allow-failures",
        type=int,
        default=0,
        metavar="N",
        help="exit 0 even if up to N decision points failed across the runs (default 0)",
    )
    add_db_flag(s)
    add_spending_flags(s, "benchmark (every run together)")
    s.set_defaults(fn=cmd_benchmark)
