"""`tradegraph backtest`: the kernel's backtest task, run and followed in the foreground."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

METRIC_ROWS = (
    ("total_return", "Total return", "pct"),
    ("annualised_return", "Annualised return", "pct"),
    ("annualised_volatility", "Annualised vol", "frac"),
    ("sharpe", "Sharpe", "num"),
    ("sortino", "Sortino", "num"),
    ("max_drawdown", "Max drawdown", "frac"),
    ("max_drawdown_peak", "  peak", "str"),
    ("max_drawdown_trough", "  trough", "str"),
    ("calmar", "Calmar", "num"),
    ("hit_rate", "Hit rate", "frac"),
    ("turnover", "Turnover (x avg equity)", "num"),
    ("num_trades", "Trades", "str"),
    ("average_exposure", "Avg exposure", "frac"),
    ("final_equity", "Final equity", "money"),
)


def _fmt(v: Any, kind: str) -> str:
    if v is None:
        return "—"
    if kind == "pct":
        return f"{v * 100:+.2f}%"
    if kind == "frac":
        return f"{v * 100:.2f}%"
    if kind == "num":
        return f"{v:.3f}"
    if kind == "money":
        return f"{v:,.2f}"
    return str(v)


def metrics_table(result) -> Any:
    from rich.table import Table

    a = result.actions
    failed, degraded = a.get("failed", 0), result.cycle_statuses.get("degraded", 0)
    t = Table(
        title=f"backtest {result.episode_id}: {result.decision_points} decision points — "
        f"{a.get('trade', 0)} traded, {a.get('hold', 0)} held, {a.get('rejected', 0)} rejected, "
        + (f"[bold red]{failed} FAILED[/]" + (f" ({degraded} degraded)" if degraded else "") if failed else "0 failed"),
        # the warnings (short window, failed cycles) belong to the figures, so they sit under them
        caption="\n".join(f"[yellow]warning:[/] {w}" for w in result.warnings) or None,
    )
    t.add_column("metric")
    # the agent's figures cover only the points where it decided: a failed point is no flat day it chose
    t.add_column(
        f"agent ([bold red]{failed} of {result.decision_points} points failed[/])" if failed else "agent",
        justify="right",
    )
    t.add_column("buy & hold (equal weight)", justify="right")
    for key, label, kind in METRIC_ROWS:
        t.add_row(label, _fmt(result.metrics.get(key), kind), _fmt(result.benchmark_metrics.get(key), kind))
    return t


def cmd_backtest(args) -> int:
    from pathlib import Path

    from agent.brokers.settings import BROKERS
    from graph.kernel.models import RunId
    from graph.services.run_files import run_file_exists
    from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, parse_window, writable_dir, writable_file
    from graph.transports.cli.data import data_inputs
    from graph.transports.cli.spending import spending_inputs

    # a backtest fills against its own simulation: a broker setting is refused, never silently ignored
    broker = (os.environ.get("TRADEGRAPH_BROKER") or "sim").strip().lower()
    if broker != "sim":
        raise CliError(
            f"TRADEGRAPH_BROKER={broker!r}: a backtest runs on the simulated book only (sim; known "
            f"brokers: {', '.join(BROKERS)})"
        )
    # the flags' own syntax, named as flags, before any store is opened; the kernel checks the rest
    symbols = parse_window(args)
    for flag, value in (
        ("--capital", args.capital),
        ("--fees-bps", args.fees_bps),
        ("--slippage-bps", args.slippage_bps),
    ):
        if value < 0 or (flag == "--capital" and value == 0):
            raise CliError(f"{flag} {value:g} must be {'positive' if flag == '--capital' else 'non-negative'}")
    if args.every < 1:
        raise CliError(f"--every {args.every} must be at least 1")
    if args.allow_failures < 0:
        raise CliError(f"--allow-failures {args.allow_failures} must be non-negative")
    writable_dir("--out", args.out)  # outputs that can't be written are refused before any point runs
    writable_file("--plot", args.plot, makes_folders=True)
    run_id = args.run_id if args.run_id is not None else f"bt-{uuid.uuid4().hex[:8]}"  # "" is refused, not replaced
    check_id_flag(RunId, run_id, "--run-id")  # before it is joined to --out below
    # a run that exists is resumed on the files it started on (the kernel reads them from its session)
    data = data_inputs(args, continuing=run_file_exists(Path(args.out) / run_id / "config.json"))
    result = run_in_foreground(
        args,
        dict(
            symbols=symbols,
            start=args.start,
            end=args.end,
            every=args.every,
            capital=args.capital,
            fees_bps=args.fees_bps,
            slippage_bps=args.slippage_bps,
            market=args.market,
            memory=args.memory,
            run_id=run_id,
            **spending_inputs(args),
            **data,
        ),
    )
    plot = None
    if args.plot:
        drawn = Path(args.out) / run_id / "equity.png"  # the task drew the complete run already
        if drawn.is_file():
            import shutil

            Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
            plot = str(shutil.copyfile(drawn, args.plot))
        else:
            from graph.services.backtest.plot import plot_result

            plot = str(plot_result(result, args.plot))
    if args.json:
        print(
            json.dumps(
                {
                    "run_id": run_id,
                    "run_dir": f"{args.out}/{run_id}",
                    "decision_points": result.decision_points,
                    "actions": result.actions,
                    "cycle_statuses": result.cycle_statuses,
                    "failed_points": result.failed_points,
                    "warnings": result.warnings,
                    "exits": result.exits,
                    "metrics": result.metrics,
                    "benchmark": result.benchmark,
                    "benchmark_metrics": result.benchmark_metrics,
                    "llm_cost": result.llm_cost,
                    "plot": plot,
                },
                default=str,
            )
        )
    else:
        from rich.console import Console

        from agent.pricing import dollars
        from graph.transports.cli.render import spend_table

        c = Console()
        c.print(metrics_table(result))
        if result.llm_cost.get("by_state"):
            c.print(spend_table(result.llm_cost, "LLM spend by state, whole run"))
            c.print(
                f"llm calls: {result.llm_cost['calls']} (+{result.llm_cost['cached_calls']} cached)  tokens: "
                f"{result.llm_cost['total_tokens']}  cost: {dollars(result.llm_cost)}"
            )
        c.print(f"run id {run_id}: logs in {args.out}/{run_id}/" + (f"; plot {plot}" if plot else ""))
    failed = result.actions.get("failed", 0)
    if failed > args.allow_failures:
        import sys

        print(
            f"tradegraph: error: {failed} of {result.decision_points} cycle(s) failed (allowed: "
            f"{args.allow_failures}); first at {result.failed_points[0]['date']}: "
            f"{str(result.failed_points[0]['error']).splitlines()[0][:200]}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def check_id_flag(kind, value: str, flag: str) -> None:
    """An id that becomes a folder under --out, refused by the kernel's own rule (graph.kernel.models.FolderName)
    with the flag named."""
    from graph.kernel.errors import BadInput
    from graph.kernel.models import check_name
    from graph.transports.cli.common import CliError

    try:
        check_name(kind, value, flag)
    except BadInput as e:
        raise CliError(e.message) from None


def run_in_foreground(args, inputs: dict) -> Any:
    """The kernel's backtest path, waited for (graph/transports/cli/foreground.py): a stored task run by a thread of
    this process, followed with a progress bar; returns the complete run's result."""

    from graph.transports.cli.common import kernel
    from graph.transports.cli.foreground import wait_for
    from schemas.simulation import EpisodeResult

    with kernel(args.db, experiments_dir=args.out) as k:
        task, _ = wait_for(k, "start_backtest", inputs, args, what="backtest", resume=lambda t: f"--run-id {t.run_id}")
        files = {a.name: a.path for a in k.call("task_artifacts", {"task_id": task.task_id}, transport="cli").artifacts}
    from graph.services.run_files import read_run_text

    return EpisodeResult.model_validate_json(read_run_text(files["result.json"]))


def register(subparsers) -> None:
    from graph.transports.cli.common import add_runs_flag
    from graph.transports.cli.data import add_data_flags

    b = subparsers.add_parser("backtest", help="run (or resume) a backtest episode: one graph cycle per decision point")
    b.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT,IBM,GOOG")
    b.add_argument("--start", required=True, help="YYYY-MM-DD")
    b.add_argument("--end", required=True, help="YYYY-MM-DD")
    b.add_argument("--every", type=int, default=1, help="decide every N trading days (default 1)")
    b.add_argument("--capital", type=float, default=100_000.0)
    b.add_argument("--fees-bps", type=float, default=1.0)
    b.add_argument("--slippage-bps", type=float, default=2.0)
    b.add_argument("--market", default="us_equity", choices=["us_equity", "cn_a_share", "crypto"])
    b.add_argument("--run-id", default=None, help="resume this run if <runs folder>/<id>/ exists")
    add_runs_flag(b)
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--plot", default=None, help="write equity curves (agent vs buy & hold) to this PNG")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument(
        "--memory",
        default="session",
        choices=["on", "off", "session"],
        help="past notes agents recall: session (this run's only; default), on (all runs', known "
        "before each date), off",
    )
    b.add_argument(
        "--allow-failures",
        type=int,
        default=0,
        metavar="N",
        help="exit 0 even if up to N cycles failed (default 0: any failed cycle exits 1)",
    )
    b.add_argument("--db", default=None, help="store URI (default: $MONGODB_URI, else the embedded store)")
    from graph.transports.cli.spending import add_spending_flags

    add_spending_flags(b, "run")
    add_data_flags(b)
    b.set_defaults(fn=cmd_backtest)
