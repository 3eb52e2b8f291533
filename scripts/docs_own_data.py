"""The commands behind docs/own-data.md's blocks: ACME, a fictional company, from a CSV to
a cycle, a backtest and a verified replay, what tradegraph says to bad files, and StockBench's shipped tree. The
walkthrough's folders are relabelled as the doc names them (/tmp/acme-demo, /tmp/acme-elsewhere, …)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _tradegraph import ROOT
from docs_cli import REPLAY_WIDTH, Block, Cli, fence, found, rewrapped, standin

EXAMPLES = ROOT / "docs" / "examples"


# ---------------------------------------------------------------------------------------------------------------
# docs/own-data.md: ACME from a CSV to a cycle, a backtest and a verified replay

TOML = '[data]\nprices = "data/acme.csv"\nnews = "data/acme_news.jsonl"\nfundamentals = "data/acme_fundamentals.json"\n'


def own_data_story(cli: Cli, tmp: Path) -> list[Block]:
    demo, elsewhere, other = tmp / "acme-demo", tmp / "acme-elsewhere", tmp / "other-store"
    for folder, shown in ((demo, "/tmp/acme-demo"), (elsewhere, "/tmp/acme-elsewhere"), (other, "/tmp/other-store")):
        folder.mkdir()
        cli.labels.add(folder, shown)
    blocks = []

    # 1. a price file
    made = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_acme.py"), "data/acme.csv"],
        cwd=demo,
        capture_output=True,
        text=True,
        check=True,
    )
    if (demo / "data/acme.csv").read_bytes() != (EXAMPLES / "acme.csv").read_bytes():
        raise RuntimeError("make_acme.py no longer writes docs/examples/acme.csv byte for byte, as the doc says")
    head = (demo / "data/acme.csv").read_text().splitlines()[:3]
    blocks.append(
        Block(
            "acme-make",
            fence(
                "\n".join(
                    [
                        "$ mkdir /tmp/acme-demo && cd /tmp/acme-demo",
                        "$ python ~/tradegraph/docs/examples/make_acme.py data/acme.csv",
                        made.stdout.strip(),
                        "$ head -3 data/acme.csv",
                        *head,
                    ]
                )
            ),
        )
    )
    unknown = cli("run", "--symbols", "ACME", "--as-of", "2024-03-01", cwd=demo, ok=2)
    blocks.append(Block("acme-unknown", fence(cli.shown(unknown))))

    # 2. files named in tradegraph.toml
    for name in ("acme_news.jsonl", "acme_fundamentals.json"):
        shutil.copy(EXAMPLES / name, demo / "data" / name)
    (demo / "tradegraph.toml").write_text(TOML)
    check = cli("data", "check", cwd=demo)
    blocks.append(Block("acme-check", fence(cli.shown(check))))

    # 3. a cycle, and the files its manifest records
    run = cli("run", "--symbols", "ACME", "--as-of", "2024-03-01", cwd=demo)
    sid = run.session()
    cli.labels.add(sid, standin("acme"))
    blocks.append(Block("acme-run", fence(cli.labels.apply(elide_screen(cli.shown(run), keep_tables=2)))))
    from schemas.events import ManifestEvent, parse_event

    manifest = parse_event(json.loads(cli("events", sid, "--kind", "manifest").out.splitlines()[0]))
    assert isinstance(manifest, ManifestEvent)
    files = {
        k: {"source": v["source"], "sha256": v["sha256"]}
        for k, v in (manifest.payload.data or {}).items()
        if isinstance(v, dict) and "sha256" in v
    }
    blocks.append(
        Block(
            "acme-manifest",
            fence(
                cli.labels.apply(
                    f"$ tradegraph events {sid} --kind manifest      # payload.data of the first line:\n"
                    + json.dumps(files, indent=2)
                )
            ),
        )
    )

    # 4. continued from another folder; refused by another store; refused when its file is gone
    cli("store", "stop")  # as a reader has it: each command starts the store and stops it
    status = cli("store", "status", cwd=elsewhere)
    cli("store", "start")
    blocks.append(Block("acme-store-status", fence(cli.shown(status))))
    cont = cli("run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", sid, cwd=elsewhere)
    blocks.append(
        Block(
            "acme-continue",
            fence(
                cli.labels.apply(
                    "$ cd /tmp/acme-elsewhere\n"
                    + elide_screen(cli.shown(cont), keep_tables=0, keep=("SCANNING", "EXECUTING"))
                )
            ),
        )
    )
    foreign = cli(
        "run",
        "--symbols",
        "ACME",
        "--as-of",
        "2024-03-04",
        "--session",
        sid,
        cwd=elsewhere,
        env={"TRADEGRAPH_HOME": str(other)},
        ok=2,
    )
    blocks.append(Block("acme-other-store", fence(cli.shown(foreign, prefix=f"TRADEGRAPH_HOME={other} "))))
    shutil.copy(demo / "data/acme.csv", elsewhere / "mine.csv")
    mine = cli("run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", "mine.csv", "--json", cwd=elsewhere)
    cli.labels.add(mine.session(), standin("acme-mine"))
    (elsewhere / "mine.csv").unlink()
    gone = cli("run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", mine.session(), cwd=elsewhere, ok=2)
    blocks.append(Block("acme-file-gone", fence(cli.shown(gone))))

    # 5. a backtest, and a resume that names another file
    bt = cli(
        "backtest",
        "--symbols",
        "ACME",
        "--start",
        "2024-01-02",
        "--end",
        "2024-06-28",
        "--every",
        "5",
        "--run-id",
        "acme-h1",
        "--no-progress",
        cwd=demo,
        columns=100,
    )
    blocks.append(Block("acme-backtest", fence("$ cd /tmp/acme-demo\n" + cli.shown(bt))))
    shutil.copy(demo / "data/acme.csv", demo / "data/acme2.csv")
    other_file = cli(
        "backtest",
        "--symbols",
        "ACME",
        "--start",
        "2024-01-02",
        "--end",
        "2024-06-28",
        "--every",
        "5",
        "--run-id",
        "acme-h1",
        "--prices",
        "data/acme2.csv",
        cwd=demo,
        ok=2,
    )
    blocks.append(Block("acme-resume-refused", fence(cli.shown(other_file))))

    # 6. replay and verify, with no flags, from another folder; the backtest's session too
    verify = cli("replay", sid, "--verify", cwd=elsewhere)
    blocks.append(Block("acme-verify", fence("$ cd /tmp/acme-elsewhere\n" + cli.shown(verify))))
    bt_verify = cli("replay", "bt-acme-h1", "--verify", cwd=demo)
    bt_cycles = len(re.findall(r": IDENTICAL", bt_verify.out))
    bt_events = int(found(r"hash chain: intact \((\d+) events\)", bt_verify.out).group(1))
    blocks.append(
        Block(
            "acme-backtest-verify",
            f"`bt-acme-h1`, {bt_cycles} cycles, {bt_events:,} events) verifies the same way: {bt_cycles} × IDENTICAL",
        )
    )

    # 7. a file changed after the run
    with open(demo / "data/acme.csv", "a") as fh:
        fh.write("ACME,2025-01-02,47.10,47.90,46.50,47.50,1000000\n")
    changed = cli("replay", sid, "--verify", cwd=demo)
    blocks.append(
        Block(
            "acme-changed",
            fence(
                '$ echo "ACME,2025-01-02,47.10,47.90,46.50,47.50,1000000" >> /tmp/acme-demo/data/acme.csv\n'
                + rewrapped(cli.shown(changed), REPLAY_WIDTH)
            ),
        )
    )

    return blocks + troubleshooting(cli, tmp)


def elide_screen(
    text: str,
    *,
    keep_tables: int,
    keep: tuple[str, ...] = (),
    gap: str = "    … (debate, theses and risk-check tables) …",
) -> str:
    """An approval screen shortened as the doc shows it: its header, the first `keep_tables` tables whole, the
    States rows named in `keep`, `…` where lines were left out, and the execution and the last line whole."""
    lines = text.split("\n")
    tail = next(i for i, line in enumerate(lines) if line.startswith("Execution:"))
    body, tables, shown, skipped = lines[:tail], 0, [], False
    for i, line in enumerate(body):
        if i == 0 or line.startswith("$ ") or line.startswith("tradegraph cycle"):
            shown.append(line)
            continue
        if line.startswith("└"):
            tables += 1
        within = tables < keep_tables or (tables == keep_tables and line.startswith("└") and keep_tables)
        if within or any(line.startswith(f"│ {name} ") for name in keep):
            shown.append(line)
            skipped = False
        elif not skipped:
            shown.append(gap if keep_tables else "…")
            skipped = True
    execution = [line for line in lines[tail:] if line.startswith("Execution:") or re.match(r"  \S", line)]
    if not keep_tables and shown[-1] != "…":
        shown.append("…")
    return "\n".join(shown + (execution if keep_tables else []) + [lines[-1]])


# what each row does wrong, and the command that shows it (files written in a scratch folder)
TROUBLE = (
    (
        "named a file that isn't there",
        "acme-demo",
        None,
        ("run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", "nope.csv"),
    ),
    (
        "left a cell empty",
        "acme-x",
        ("short.csv", "ACME,2024-01-03,10,10.5,9.5,10.2,\n"),
        ("data", "check", "--prices", "short.csv"),
    ),
    ("misspelt a toml key", "acme-x-toml", ("tradegraph.toml", '[data]\nprice = "data/acme.csv"\n'), ("data", "check")),
    ("asked for a symbol the file lacks", "acme-demo", None, ("run", "--symbols", "ACMX", "--as-of", "2024-03-01")),
    (
        "wrote `inf` in a price",
        "acme-x",
        ("bad.csv", "ACME,2024-01-03,10,10.5,9.5,inf,1000\n"),
        ("data", "check", "--prices", "bad.csv"),
    ),
    (
        "wrote a bar whose high is below its close",
        "acme-x",
        ("bad2.csv", "ACME,2024-01-03,10,10.4,9.5,10.5,1000\n"),
        ("data", "check", "--prices", "bad2.csv"),
    ),
    (
        "left a `NaN` in a JSON file",
        "acme-x",
        (
            "n.jsonl",
            '{"symbol": "ACME", "published_at": "2024-01-02", '
            '"headline": "a", "source": "x"}\n{"symbol": "ACME", '
            '"published_at": "2024-01-03", "headline": "b", '
            '"source": "x", "score": NaN}\n',
        ),
        ("data", "check", "--news", "n.jsonl"),
    ),
    ("picked a weekend", "acme-demo", None, ("run", "--symbols", "ACME", "--as-of", "2024-03-02")),
)


def troubleshooting(cli: Cli, tmp: Path) -> list[Block]:
    rows = ["| you did | tradegraph says (exit 2) |", "|---|---|"]
    for what, folder, written, argv in TROUBLE:
        where = tmp / folder
        if not where.exists():
            where.mkdir()
            cli.labels.add(where, f"/tmp/{folder}")
        if written:
            name, content = written
            header = "symbol,date,open,high,low,close,volume\nACME,2024-01-02,10,10.5,9.5,10.1,1000\n"
            (where / name).write_text(header + content if name.endswith(".csv") else content)
        r = cli(*argv, cwd=where, ok=2)
        said = cli.labels.apply(r.err.strip()).removeprefix("tradegraph: error: ")
        rows.append(f"| {what} | `{said}` |")
    return [Block("acme-trouble", "\n".join(rows))]


# ---------------------------------------------------------------------------------------------------------------
# docs/own-data.md: StockBench's shipped tree

SB_KEEP = {"prices": ("AAPL", "GS"), "news": ("AAPL",), "filings": ("CAT",), "corporate actions": ("HD",)}


def stockbench_story(cli: Cli, where: Path) -> list[Block]:
    r = cli("data", "check", "--stockbench", columns=200)
    out = r.out
    shown, section, skipped = [], "", False
    for line in out.rstrip("\n").split("\n"):
        if not line.startswith("  "):
            section = line.split(":")[0]
            shown.append(line)
            skipped = False
        elif line.split()[0] in SB_KEEP.get(section, ()):
            shown.append(line)
            skipped = False
        elif not skipped:
            shown.append("  …")
            skipped = True
    text = "$ tradegraph data check                      # or: tradegraph data check --stockbench [DIR]\n" + "\n".join(
        shown
    )
    n = {
        key: found(pattern, out).group(1)
        for key, pattern in (
            ("symbols", r": (\d+) symbol\(s\)"),
            ("news", r"news: ([\d,]+) items"),
            ("dupes", r"items, ([\d,]+) duplicate"),
            ("filings", r"filings: ([\d,]+) quarters"),
            ("dividends", r"corporate actions: ([\d,]+) dividends"),
        )
    }
    summary = (
        f"{n['symbols']} symbols, the sessions each lacks, {n['news']} news items and the {n['dupes']} "
        f"duplicate{'s' if n['dupes'] != '1' else ''} dropped, {n['filings']} filings, "
        f"{n['dividends']} dividends"
    )
    return [Block("stockbench-check", fence(cli.labels.apply(text))), Block("stockbench-summary", summary)]
