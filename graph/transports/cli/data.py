"""Your own data: `tradegraph data fetch` and `data check`, and where run, backtest and features take their files
from: --prices / --news / --fundamentals; else, continuing a session or a backtest run, what it read; else the
[data] section of tradegraph.toml ($TRADEGRAPH_CONFIG, else ./tradegraph.toml; relative paths against the toml's
folder); else the bundled samples. A file asked for that cannot be read is one line naming the flag or the toml
key, and exit 2: never the bundled data instead. A StockBench tree (a folder or its archive) stands for every kind
at once: `stockbench = "DIR"` in [data] (`stockbench = true`: the archive shipped with tradegraph), or any flag or
key naming it."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Optional

from graph.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, parse_window

CONFIG_ENV = "TRADEGRAPH_CONFIG"
CONFIG_NAME = "tradegraph.toml"
DATA_KINDS = ("prices", "news", "fundamentals")
# [data] stockbench: one StockBench tree for every kind a run reads (each kind named beside it wins for that kind)
STOCKBENCH_KEY = "stockbench"
TOML_KEYS = (*DATA_KINDS, STOCKBENCH_KEY)


# ------------------------------------------------------------------------------------------ where files come from
def add_data_flags(parser) -> None:
    g = parser.add_argument_group(
        "your own data",
        "each default: what the continued session (or resumed run) "
        "read; else tradegraph.toml's [data] section; else the bundled "
        "samples. Formats: agent/data/README.md; walkthrough: "
        "docs/own-data.md",
    )
    g.add_argument("--prices", metavar="FILE", default=None, help="daily bars, CSV or Parquet")
    g.add_argument("--news", metavar="FILE", default=None, help="headlines, JSONL")
    g.add_argument("--fundamentals", metavar="FILE", default=None, help="fundamentals, JSON")


def check_config_file(env) -> None:
    """Start-up check of every command (serve_cli.startup_error): $TRADEGRAPH_CONFIG names a file, and the config
    file parses with a well-formed [data] section. ValueError, one line naming the variable or file."""
    try:
        toml_files(env)
    except CliError as e:
        raise ValueError(str(e)) from None


def config_path(env=None) -> Optional[Path]:
    """$TRADEGRAPH_CONFIG (which must exist), else ./tradegraph.toml if there is one."""
    named = (os.environ if env is None else env).get(CONFIG_ENV)
    if named:
        p = Path(named).expanduser()
        if not p.is_file():
            raise CliError(f"${CONFIG_ENV}={named}: {'not a file' if p.exists() else 'file not found'}")
        return p
    here = Path(CONFIG_NAME)
    return here if here.is_file() else None


def toml_files(env=None) -> dict[str, tuple[str, str]]:
    """kind -> (absolute path, where it was named) from the config file's [data] section."""
    path = config_path(env)
    if path is None:
        return {}
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise CliError(f"{path}: invalid TOML: {e}") from None
    section = doc.get("data", {})
    if not isinstance(section, dict):
        raise CliError(f"{path}: 'data' must be a [data] table, got {section!r}")
    out = {}
    named: str | Path
    for key, value in section.items():
        if key not in TOML_KEYS:
            raise CliError(f"{path}: [data] {key}: unknown key (known: {', '.join(TOML_KEYS)})")
        origin = f"{path} [data] {key} = {value!r}"
        if key == STOCKBENCH_KEY and value is True:
            from agent.data.stockbench import SHIPPED_ARCHIVE

            named = SHIPPED_ARCHIVE
        elif not isinstance(value, str) or not value.strip():
            raise CliError(
                f"{path}: [data] {key} = {value!r}: expected a "
                + ("StockBench folder or archive, or true" if key == STOCKBENCH_KEY else "file path")
            )
        else:
            # relative to the toml's folder, so the project works from any working directory
            named = value if value.startswith("~") else path.resolve().parent / value  # an absolute one stays
        out[key] = (_absolute(named, origin), origin)
    tree = out.pop(STOCKBENCH_KEY, None)
    return {**({kind: tree for kind in DATA_KINDS} if tree else {}), **out}


def chosen_files(args, toml: bool = True) -> dict[str, tuple[str, str]]:
    """kind -> (absolute path, origin): each flag given, else (with `toml`) the config file's entry."""
    chosen = toml_files() if toml else {}
    for kind in DATA_KINDS:
        value = getattr(args, kind, None)
        if value is not None:
            chosen[kind] = (_absolute(value, f"--{kind} {value}"), f"--{kind} {value}")
    return chosen


def _absolute(path: str | Path, origin: str) -> str:
    from agent.data.market import DataError
    from agent.data.sources import resolved

    try:
        return str(resolved(path))
    except DataError as e:
        raise CliError(f"{origin}: {e}") from None


def data_inputs(args, continuing: bool = False) -> dict[str, str]:
    """The kernel's data fields for this command, each file read once here (the kernel, in this process, reuses
    what was read) so a bad one is named as the user named it. A command `continuing` a session or a run passes
    its flags only: the kernel then reads what the session read, which the project's toml does not silently
    replace."""
    from agent.data.market import DataError
    from agent.data.sources import load_file

    chosen = chosen_files(args, toml=not continuing)
    for kind, (path, origin) in chosen.items():
        try:
            load_file(kind, path)
        except DataError as e:
            raise CliError(f"{origin}: {e}") from None
    return {kind: path for kind, (path, _) in chosen.items()}


# ------------------------------------------------------------------------------------------ data fetch
def cmd_fetch(args) -> int:
    from agent.data.market import DataError
    from agent.data.yahoo import WRITABLE, FetchFailed, fetch_yfinance, write_prices

    symbols = parse_window(args)
    if not args.out.lower().endswith(WRITABLE):
        raise CliError(f"--out {args.out}: unsupported file type (use .parquet, .pq, .csv or .csv.gz)")
    try:
        frame, notes = fetch_yfinance(symbols, args.start, args.end)
        market = write_prices(frame, args.out)
    except FetchFailed as e:
        raise CliError(str(e), EXIT_FAILED) from None
    except DataError as e:
        raise CliError(str(e)) from None
    print(f"wrote {args.out}: {len(frame)} daily bars from {args.source}")
    _print_prices(market)
    for note in notes:
        print(f"note: {note}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ data check
_KIND_BY_SUFFIX = {
    ".csv": "prices",
    ".gz": "prices",
    ".parquet": "prices",
    ".pq": "prices",
    ".jsonl": "news",
    ".json": "fundamentals",
}


def cmd_check(args) -> int:
    from agent.data.market import DataError
    from agent.data.sources import load_file
    from agent.data.stockbench import SHIPPED_ARCHIVE, is_tree

    if args.stockbench is not None:
        named = args.stockbench or str(SHIPPED_ARCHIVE)
        chosen = {STOCKBENCH_KEY: (_absolute(named, f"--stockbench {named}"), "")}
    elif args.file is not None and is_tree(args.file):
        chosen = {STOCKBENCH_KEY: (_absolute(args.file, args.file), "")}
    elif args.file is not None:
        kind = args.kind or _KIND_BY_SUFFIX.get(Path(args.file).suffix.lower())
        if kind is None:
            raise CliError(f"{args.file}: cannot tell prices, news or fundamentals from its name: add --kind")
        chosen = {kind: (_absolute(args.file, args.file), "")}  # the error names the file itself
    else:
        chosen = chosen_files(args)
        if not chosen:
            raise CliError(
                "nothing to check: give a FILE or a StockBench folder, --prices/--news/--fundamentals, "
                f"--stockbench, or a [data] section in {CONFIG_NAME} (or ${CONFIG_ENV})"
            )
    trees: set[str] = set()
    for kind, (path, origin) in chosen.items():
        try:
            if kind == STOCKBENCH_KEY or is_tree(path):
                if path not in trees:  # one report for a tree that every kind reads
                    trees.add(path)
                    _print_tree(path, args.market)
                continue
            source = load_file(kind, path)
        except DataError as e:
            raise CliError(f"{origin}: {e}" if origin else str(e)) from None
        if kind == "prices":
            print(f"prices {path}: {len(source.universe())} symbol(s)")
            _print_prices(source, args.market)
        else:
            cov = source.coverage()
            unit, span = ("headlines", "published") if kind == "news" else ("records", "periods")
            label = f" (source '{source.source}')" if kind == "fundamentals" else ""
            print(f"{kind} {path}{label}: {len(cov)} symbol(s), {sum(n for n, _, _ in cov.values())} {unit}")
            for symbol, (n, first, last) in cov.items():
                print(f"  {symbol:<8} {n:>6} {unit}, {span} {first}..{last}")
    return EXIT_OK


def _print_tree(path: str, profile: str) -> None:
    """What a StockBench tree holds, per symbol: bars and the sessions they lack, news items and the duplicates
    dropped, the filings with a public time (and those left out), dividends and splits."""
    from agent.data.stockbench import load_tree

    tree = load_tree(path)
    market, news, filings, actions = tree.market, tree.news, tree.fundamentals, tree.actions
    print(f"StockBench data {tree.path} (sha256 {tree.sha256[:12]}…): {len(market.universe())} symbol(s)")
    print(f"prices: {sum(market.rows(s) for s in market.universe()):,} bars (split-adjusted, not dividend-adjusted)")
    _print_prices(market, profile, every_gap=True)
    raw = sum(n for n, _ in tree.news_counts.values())
    dropped = sum(d for _, d in tree.news_counts.values())
    print(
        f"news: {raw:,} items, {dropped} duplicate(s) dropped, {raw - dropped:,} kept (at their true publication "
        f"time, UTC)"
    )
    for symbol, (n, first, last) in news.coverage().items():
        print(
            f"  {symbol:<8} {n:>6} items ({tree.news_counts[symbol][1]} duplicate(s) dropped), published "
            f"{first}..{last}"
        )
    cov, left = filings.coverage(), filings.left_out()
    print(
        f"filings: {sum(n for n, _, _ in cov.values()):,} quarters with a public time, "
        f"{sum(map(len, left.values()))} left out (no filing or acceptance time)"
    )
    for symbol, (n, first, last) in cov.items():
        print(
            f"  {symbol:<8} {n:>6} quarters, periods {first}..{last}"
            + (f"; left out: {', '.join(left[symbol])}" if symbol in left else "")
        )
    ca = actions.coverage()
    print(
        f"corporate actions: {sum(v[0] for v in ca.values()):,} dividends, {sum(v[1] for v in ca.values())} "
        f"splits (the bars already carry the splits: never applied to shares again)"
    )
    for symbol, (n_div, n_split, first, last) in ca.items():
        print(
            f"  {symbol:<8} {n_div:>6} dividends"
            + (f", ex-dates {first}..{last}" if n_div else "")
            + f"; {n_split} split(s)"
        )


def _print_prices(market, profile: Optional[str] = None, every_gap: bool = False) -> None:
    """One line per symbol; with a market profile, also the bars its calendar says cannot be decided on, and the
    sessions without a bar (the first, or with `every_gap` each run of consecutive ones)."""
    from agent.markets import trading_days

    for symbol in market.universe():
        first, last = market.date_range(symbol)
        line = f"  {symbol:<8} {market.rows(symbol):>6} bars {first.date()}..{last.date()}"
        if profile is not None:
            sessions = {d.normalize() for d in trading_days(profile, first, last)}
            bars = set(market.trading_dates(symbol))
            closed, gaps = sorted(bars - sessions), sorted(sessions - bars)
            line += f"; {profile}: " + (
                f"{len(closed)} bar(s) on closed days (first {closed[0].date()})"
                if closed
                else "every bar on a session"
            )
            if gaps:
                line += f", {len(gaps)} session(s) without a bar " + (
                    f"({_runs(gaps, sorted(sessions))})" if every_gap else f"(first {gaps[0].date()})"
                )
            else:
                line += ", no session missed"
        print(line)


def _runs(gaps: list, sessions: list) -> str:
    """Missing sessions as runs of consecutive sessions: `2025-01-10, 2025-02-11..2025-02-19 (6)`."""
    index = {d: i for i, d in enumerate(sessions)}
    runs: list[list] = []
    for d in gaps:
        if runs and index[d] == index[runs[-1][-1]] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ", ".join(str(r[0].date()) if len(r) == 1 else f"{r[0].date()}..{r[-1].date()} ({len(r)})" for r in runs)


def register(sub) -> None:
    d = sub.add_parser("data", help="your own data: fetch daily bars (yfinance) or check a file")
    dsub = d.add_subparsers(dest="data_command", required=True)

    f = dsub.add_parser("fetch", help="download daily bars into a price file (needs the 'data' extra and internet)")
    f.add_argument("--source", required=True, choices=["yfinance"])
    f.add_argument("--symbols", required=True, help="comma-separated Yahoo tickers, e.g. AAPL,MSFT")
    f.add_argument("--start", required=True, help="YYYY-MM-DD, first day")
    f.add_argument("--end", required=True, help="YYYY-MM-DD, last day (inclusive)")
    f.add_argument("--out", required=True, metavar="FILE", help="FILE.parquet (or .csv, .csv.gz)")
    f.set_defaults(fn=cmd_fetch)

    c = dsub.add_parser(
        "check",
        help="validate a data file or a StockBench tree and print what it holds (no FILE: "
        "the files run would read, from the flags or tradegraph.toml)",
    )
    c.add_argument(
        "file",
        nargs="?",
        default=None,
        metavar="FILE",
        help="a prices, news or fundamentals file, or a StockBench folder (DIR or DIR/storage) or archive",
    )
    c.add_argument(
        "--stockbench",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="check a StockBench tree; alone: the archive shipped with tradegraph",
    )
    c.add_argument(
        "--kind",
        choices=list(DATA_KINDS),
        default=None,
        help="what FILE holds (default: from its extension: .csv/.parquet prices, .jsonl news, .json fundamentals)",
    )
    c.add_argument(
        "--market",
        default="us_equity",
        choices=["us_equity", "cn_a_share", "crypto"],
        help="the calendar bars are checked against (a cycle decides only on its sessions)",
    )
    add_data_flags(c)
    c.set_defaults(fn=cmd_check)
