"""Your own data: `tradegraph data fetch` and `data check`, and where run, backtest and features take their files
from: --prices / --news / --fundamentals; else, continuing a session or a backtest run, what it read; else the
[data] section of tradegraph.toml ($TRADEGRAPH_CONFIG, else ./tradegraph.toml; relative paths against the toml's
folder); else the bundled samples. A file asked for that cannot be read is one line naming the flag or the toml
key, and exit 2: never the bundled data instead."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Optional

from graph.kernel.transports.cli.common import EXIT_FAILED, EXIT_OK, CliError, parse_window

CONFIG_ENV = "TRADEGRAPH_CONFIG"
CONFIG_NAME = "tradegraph.toml"
DATA_KINDS = ("prices", "news", "fundamentals")


# ------------------------------------------------------------------------------------------ where files come from
def add_data_flags(parser) -> None:
    g = parser.add_argument_group("your own data", "each default: what the continued session (or resumed run) "
                                                   "read; else tradegraph.toml's [data] section; else the bundled "
                                                   "samples. Formats: agent/data/README.md; walkthrough: "
                                                   "docs/own-data.md")
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
    for key, value in section.items():
        if key not in DATA_KINDS:
            raise CliError(f"{path}: [data] {key}: unknown key (known: {', '.join(DATA_KINDS)})")
        if not isinstance(value, str) or not value.strip():
            raise CliError(f"{path}: [data] {key} = {value!r}: expected a file path")
        # relative to the toml's folder, so the project works from any working directory
        origin = f"{path} [data] {key} = {value!r}"
        named = value if value.startswith("~") else path.resolve().parent / value  # an absolute value stays as is
        out[key] = (_absolute(named, origin), origin)
    return out


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
_KIND_BY_SUFFIX = {".csv": "prices", ".gz": "prices", ".parquet": "prices", ".pq": "prices", ".jsonl": "news",
                   ".json": "fundamentals"}


def cmd_check(args) -> int:
    from agent.data.market import DataError
    from agent.data.sources import load_file

    if args.file is not None:
        kind = args.kind or _KIND_BY_SUFFIX.get(Path(args.file).suffix.lower())
        if kind is None:
            raise CliError(f"{args.file}: cannot tell prices, news or fundamentals from its name: add --kind")
        chosen = {kind: (_absolute(args.file, args.file), "")}  # the error names the file itself
    else:
        chosen = chosen_files(args)
        if not chosen:
            raise CliError("nothing to check: give a FILE, --prices/--news/--fundamentals, or a [data] section in "
                           f"{CONFIG_NAME} (or ${CONFIG_ENV})")
    for kind, (path, origin) in chosen.items():
        try:
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


def _print_prices(market, profile: Optional[str] = None) -> None:
    """One line per symbol; with a market profile, also the bars its calendar says cannot be decided on."""
    from agent.markets import trading_days

    for symbol in market.universe():
        first, last = market.date_range(symbol)
        line = f"  {symbol:<8} {market.rows(symbol):>6} bars {first.date()}..{last.date()}"
        if profile is not None:
            sessions = {d.normalize() for d in trading_days(profile, first, last)}
            bars = set(market.trading_dates(symbol))
            closed, gaps = sorted(bars - sessions), sorted(sessions - bars)
            line += f"; {profile}: " + (f"{len(closed)} bar(s) on closed days (first {closed[0].date()})"
                                        if closed else "every bar on a session")
            line += f", {len(gaps)} session(s) without a bar (first {gaps[0].date()})" if gaps else ", no session missed"
        print(line)


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

    c = dsub.add_parser("check", help="validate a data file and print its symbols and date ranges (no FILE: the "
                                      "files run would read, from the flags or tradegraph.toml)")
    c.add_argument("file", nargs="?", default=None, metavar="FILE")
    c.add_argument("--kind", choices=list(DATA_KINDS), default=None,
                   help="what FILE holds (default: from its extension: .csv/.parquet prices, .jsonl news, "
                        ".json fundamentals)")
    c.add_argument("--market", default="us_equity", choices=["us_equity", "cn_a_share", "crypto"],
                   help="the calendar bars are checked against (a cycle decides only on its sessions)")
    add_data_flags(c)
    c.set_defaults(fn=cmd_check)
