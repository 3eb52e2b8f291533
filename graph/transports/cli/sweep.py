"""`tradegraph sweep`: the kernel's sweep task (graph/services/sweep/), started from a TOML grid and/or flags and followed
in the foreground: episodes done, running and failed, and the ETA; then the aggregate per configuration.

Ctrl-C cancels (each running episode stops after its current decision point); `--resume SWEEP_ID` continues it
on the grid it started with (experiments/SWEEP_ID/grid.json)."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from rich.markup import escape

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, writable_dir
from graph.transports.cli.foreground import Waited, cancel_and_join, shows_progress, started


def parse_windows(text: str) -> dict[str, Any]:
    """rolling:START:END:LENGTH:STEP | walk-forward:START:END:TRAIN:TEST | START..END[,START..END...]"""
    kind, _, rest = text.partition(":")
    try:
        if kind == "rolling":
            start, end, length, step = rest.split(":")
            return {"kind": "rolling", "start": start, "end": end, "length": int(length), "step": int(step)}
        if kind in ("walk-forward", "walk_forward"):
            start, end, train, test = rest.split(":")
            return {"kind": "walk_forward", "start": start, "end": end, "train": int(train), "test": int(test)}
        spans = [part.split("..") for part in text.split(",")]
        if all(len(s) == 2 for s in spans):
            return {"kind": "list", "spans": spans}
    except ValueError:
        pass
    raise CliError(
        f"--windows {text!r}: expected rolling:START:END:LENGTH:STEP, walk-forward:START:END:TRAIN:TEST "
        f"or START..END[,START..END...]"
    )


def read_grid(path: str) -> dict[str, Any]:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CliError(f"--grid {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"--grid {path}: can't be read: {type(e).__name__}") from None
    except tomllib.TOMLDecodeError as e:
        raise CliError(f"--grid {path} is not valid TOML: {str(e).splitlines()[0]}") from None
    return raw.get("sweep", raw)


def grid_inputs(args) -> dict[str, Any]:
    """The grid file's fields, then each flag given over them; the kernel validates the whole."""
    from graph.kernel.models import SweepId
    from graph.transports.cli.backtest import check_id_flag
    from graph.transports.cli.spending import spending_inputs

    for flag, value in (("--resume", args.resume), ("--sweep-id", args.sweep_id)):
        if value is not None:  # each becomes a folder under --out: checked before it is joined to it
            check_id_flag(SweepId, value, flag)
    if args.resume:
        from graph.services.run_files import read_run_text, run_file_exists

        path = Path(args.out) / args.resume / "grid.json"
        if not run_file_exists(path):
            raise CliError(f"--resume {args.resume}: no sweep there ({path} not found)")
        grid = dict(json.loads(read_run_text(path))["grid"])
        grid["sweep_id"] = args.resume
        return grid
    grid = read_grid(args.grid) if args.grid else {}
    if args.symbols:
        grid["universes"] = [[s.strip() for s in u.split(",") if s.strip()] for u in args.symbols]
    if args.windows:
        grid["windows"] = parse_windows(args.windows)
    if args.memory:
        grid["memory"] = [m.strip() for m in args.memory.split(",") if m.strip()]
    if args.model:
        grid["models"] = [dict(zip(("quick", "deep"), m.split("/", 1))) for m in args.model]
    for flag in (
        "every",
        "capital",
        "fees_bps",
        "slippage_bps",
        "market",
        "workers",
        "ray_address",
        "max_retries",
        "sweep_id",
    ):
        value = getattr(args, flag)
        if value is not None:
            grid[flag] = value
    if args.rpm is not None:
        grid["requests_per_minute"] = args.rpm
    if args.tpm is not None:
        grid["tokens_per_minute"] = args.tpm
    for missing in ("universes", "windows"):
        if missing not in grid:
            flag = "--symbols" if missing == "universes" else "--windows"
            raise CliError(f"no {missing}: give {flag} or a --grid file with `{missing}`")
    spending = spending_inputs(args)
    grid.update({k: v for k, v in spending.items() if k != "no_cache" or v})
    return grid


def shortest_windows(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Per configuration, the fewest decision points of a window it completed: how much its ratios can mean."""
    short: dict[str, int] = {}
    for r in rows:
        if r.get("status") == "succeeded":
            short[r["config_key"]] = min(short.get(r["config_key"], 10**9), int(r.get("decision_points") or 0))
    return short


def short_window_warning(shortest: dict[str, int]) -> str | None:
    """The warning the backtest prints under a short window's figures (graph/services/backtest/loop.py), for a sweep's."""
    from graph.services.backtest.loop import SHORT_WINDOW_POINTS

    short = {k: n for k, n in shortest.items() if n < SHORT_WINDOW_POINTS}
    if not short:
        return None
    named = ", ".join(f"{k} ({n})" for k, n in list(short.items())[:3]) + (", …" if len(short) > 3 else "")
    return (
        f"* short windows: {len(short)} configuration(s) completed a window of fewer than {SHORT_WINDOW_POINTS} "
        f"decision points (fewest: {named}); its Sharpe extrapolates so few points to a year and means little"
    )


def aggregate_table(agg: list[dict[str, Any]], summary: dict[str, Any], shortest: dict[str, int] | None = None) -> Any:
    """Per configuration across its windows: medians, the spread, its buy and hold, failures. A Sharpe drawn from a
    window too short to mean anything is starred (short_window_warning says why)."""
    from rich.table import Table

    from graph.services.backtest.loop import SHORT_WINDOW_POINTS

    def pct(spread: dict, stat: str = "median", sign: str = "+") -> str:
        v = (spread or {}).get(stat)
        return "—" if v is None else f"{v * 100:{sign}.2f}%"

    failed = summary.get("by_status", {}).get("failed", 0)
    t = Table(
        title=f"sweep: {summary['episodes']} episodes, {summary['configurations']} configurations — "
        + (f"[bold red]{failed} episode(s) FAILED[/]" if failed else "0 failed")
        + (f", [bold red]{summary['failed_cycles']} failed cycle(s)[/]" if summary["failed_cycles"] else ""),
        caption="medians across each configuration's windows (spreads: aggregate.csv); B&H: its universe held; "
        "beat: windows that beat it; failed: cycles",
    )
    t.add_column("configuration", overflow="fold", min_width=16)
    for col in ("ok", "return", "Sharpe", "maxDD", "B&H", "beat", "failed"):
        t.add_column(col, justify="right", no_wrap=True)
    for a in agg:
        sharpe = a["sharpe"]["median"]
        star = "*" if (shortest or {}).get(a["config_key"], SHORT_WINDOW_POINTS) < SHORT_WINDOW_POINTS else ""
        t.add_row(
            a["config_key"],
            f"{a['succeeded']}/{a['episodes']}",
            pct(a["total_return"]),
            "—" if sharpe is None else f"{sharpe:.2f}{star}",
            pct(a["max_drawdown"], sign=""),
            pct(a["benchmark_total_return"]),
            f"{a['beat_benchmark']}/{a['succeeded']}",
            f"[bold red]{a['failed_cycles']}[/]" if a["failed_cycles"] else "0",
        )
    return t


def cmd_sweep(args) -> int:
    from graph.kernel.errors import Failed, from_line
    from graph.transports.cli.common import kernel
    from graph.transports.cli.data import data_inputs

    if args.allow_failures < 0:
        raise CliError(f"--allow-failures {args.allow_failures} must be non-negative")
    writable_dir("--out", args.out)
    grid = grid_inputs(args)
    if not args.resume:
        grid.update(data_inputs(args))
    with kernel(args.db, experiments_dir=args.out) as k:
        # the store calls off the main thread, where a Ctrl-C lands (cli/foreground.py)
        task, interrupted = started(k, "start_sweep", grid)
        following = Waited()
        try:
            if interrupted:
                raise KeyboardInterrupt
            view = following.run(lambda: _follow(k, task, shows_progress(args), following))
        except KeyboardInterrupt:
            following.halt()
            print(
                f"tradegraph: stopping each running episode after its current decision point; resume with "
                f"`tradegraph sweep --resume {task.run_id}`",
                file=sys.stderr,
            )
            Waited().run(lambda: cancel_and_join(k, task))
            raise
        k.tasks.join(task.task_id)
        if view.status == "cancelled":
            raise Failed(f"sweep {task.run_id} cancelled; resume it with `tradegraph sweep --resume {task.run_id}`")
        if view.status != "succeeded":
            raise from_line(view.error) if view.error else Failed(f"sweep task {task.task_id} {view.status}")
        arts = k.call("task_artifacts", {"task_id": task.task_id}, transport="cli")
    from graph.services.sweep.results import load_rows

    summary, agg = view.summary or {}, (arts.metrics or {}).get("aggregate") or []
    files = {a.name: a.path for a in arts.artifacts}
    shortest = shortest_windows(list(load_rows(Path(arts.run_dir)).values())) if arts.run_dir else {}
    short = short_window_warning(shortest)
    if args.json:
        print(
            json.dumps(
                {
                    "sweep_id": task.run_id,
                    "run_dir": arts.run_dir,
                    "summary": summary,
                    "aggregate": agg,
                    "files": files,
                    "warnings": [short] if short else [],
                },
                default=str,
            )
        )
    else:
        from rich.console import Console

        c = Console()
        c.print(aggregate_table(agg, summary, shortest))
        for w in (summary.get("warnings") or []) + ([short] if short else []):
            c.print(f"[yellow]warning:[/] {escape(w)}")
        c.print(
            f"sweep {task.run_id}: results in {arts.run_dir}/ (results.csv, aggregate.csv"
            + (", sweep.png" if "sweep.png" in files else "")
            + ")"
        )
    failed_eps = summary.get("by_status", {}).get("failed", 0)
    if failed_eps or summary.get("failed_cycles", 0) > args.allow_failures:
        first = (summary.get("failed") or [{}])[0]
        print(
            f"tradegraph: error: {failed_eps} of {summary.get('episodes')} episode(s) failed and "
            f"{summary.get('failed_cycles', 0)} cycle(s) failed (allowed: {args.allow_failures} cycles)"
            + (f"; first: {first.get('episode_id')}: {first.get('error')}" if first else ""),
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _follow(k, task, progress: bool, following: Waited):
    """The task's views until it ends or the command stops following, drawn as one bar over episodes."""
    bar = job = None
    view = task
    if progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        def new_bar() -> Progress:
            made = Progress(
                TextColumn("[bold]sweep {task.fields[sweep]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("running {task.fields[running]}"),
                TextColumn("failed {task.fields[failed]}"),
                TextColumn("ETA {task.fields[eta]}"),
                console=Console(stderr=True),
            )
            made.start()
            return made

        bar = following.opened(new_bar, Progress.stop)  # closed by the main thread if it stops following first
        if bar is not None:
            job = bar.add_task("sweep", total=task.progress.total, sweep=task.run_id, running=0, failed=0, eta="—")
    try:
        for view in k.watch(task.task_id, poll_s=0.5):
            if following.stop:
                break
            p = view.progress
            if bar is not None and job is not None:
                eta = "—" if p.eta_s is None else f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}"
                bar.update(job, completed=p.done, total=p.total, running=p.running, failed=p.failed, eta=eta)
    finally:
        if bar is not None:
            bar.stop()
    return view


def register(subparsers) -> None:
    from graph.transports.cli.common import add_db_flag, add_runs_flag
    from graph.transports.cli.data import add_data_flags
    from graph.transports.cli.spending import add_spending_flags

    s = subparsers.add_parser(
        "sweep",
        help="run a grid of backtests (universes x windows x configurations) on Ray",
        description="Each episode is a backtest run as a Ray task; results, an aggregate per "
        "configuration and a plot go to experiments/<sweep id>/ (docs/scaling.md).",
    )
    s.add_argument("--grid", metavar="FILE", default=None, help="the grid as TOML (flags given override its keys)")
    s.add_argument("--symbols", action="append", metavar="A,B", help="one universe; repeat for several")
    s.add_argument(
        "--windows",
        default=None,
        metavar="SPEC",
        help="rolling:START:END:LENGTH:STEP, walk-forward:START:END:TRAIN:TEST or START..END[,START..END]; "
        "lengths in trading sessions",
    )
    s.add_argument("--memory", default=None, metavar="MODES", help="comma-separated memory modes (default session)")
    s.add_argument(
        "--model",
        action="append",
        metavar="QUICK[/DEEP]",
        help="a model configuration, `provider:model`; repeat for several (default: the configured tiers)",
    )
    s.add_argument("--every", type=int, default=None, help="decide every N trading days (default 5)")
    s.add_argument("--capital", type=float, default=None)
    s.add_argument("--fees-bps", type=float, default=None)
    s.add_argument("--slippage-bps", type=float, default=None)
    s.add_argument("--market", default=None, choices=["us_equity", "cn_a_share", "crypto"])
    s.add_argument("--workers", type=int, default=None, help="episodes at once (default 2)")
    s.add_argument("--ray-address", default=None, help="join this Ray cluster (default: a local instance)")
    s.add_argument("--max-retries", type=int, default=None, help="Ray retries of an episode whose worker died (3)")
    s.add_argument("--rpm", type=float, default=None, help="LLM requests per minute per provider, all workers")
    s.add_argument("--tpm", type=float, default=None, help="LLM tokens per minute per provider, all workers")
    s.add_argument("--sweep-id", default=None, help="name the sweep (an existing id with the same grid resumes)")
    s.add_argument("--resume", default=None, metavar="SWEEP_ID", help="continue this sweep on its own grid")
    add_runs_flag(s)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument(
        "--allow-failures",
        type=int,
        default=0,
        metavar="N",
        help="exit 0 even if up to N cycles failed across the sweep (a failed episode always exits 1)",
    )
    add_db_flag(s)
    add_spending_flags(s, "sweep")
    add_data_flags(s)
    s.set_defaults(fn=cmd_sweep)
