"""The commands behind every generated block of README.md and docs/*.md (scripts/make_docs.py writes them).

Each story runs the real CLI (docs_cli.Cli) in the per-user store of a temporary folder of its own, offline, and
returns its blocks; a story reuses one session where the prose follows one session. Claims the prose makes about
an output (the shipped CSV is make_acme.py's, a live export equals a later one) are checked here, and a failed
one stops the run.
"""

from __future__ import annotations

import json
import re
import tempfile
import textwrap
from pathlib import Path

from _tradegraph import ROOT
from docs_cli import Block, Cli, Labels, clean_env, fence, found, free_port, standin
from docs_own_data import elide_screen, own_data_story, stockbench_story
from docs_stockbench import offline_story as stockbench_offline_story

# ---------------------------------------------------------------------------------------------------------------
# README: one cycle, shortened; docs/usage.md: its whole approval screen and ten dates; docs/architecture.md: its cost


def approval_story(cli: Cli, where: Path) -> list[Block]:
    r = cli("run", "--symbols", "AAPL,MSFT,IBM", "--as-of", "2012-06-01")
    cli.labels.add(r.session(), standin("approval"))
    calls, tokens = (int(x) for x in found(r"llm calls: (\d+)\s+tokens: (\d+)", r.out).groups())
    return [
        Block(
            "readme-cycle",
            fence(
                elide_screen(cli.shown(r), keep_tables=1, gap="    … (analyst panel, debate, theses and risk checks) …")
            ),
        ),
        Block("approval", fence(cli.shown(r))),
        Block("approval-cost", f"about {tokens / 1000:.1f}k tokens and {calls} calls"),
    ]


# the dates tests/unit/test_offline_reasoning.py runs
TEN_DATES = (
    "2006-03-01",
    "2006-10-02",
    "2007-05-01",
    "2008-01-02",
    "2008-10-01",
    "2009-06-01",
    "2010-02-01",
    "2010-11-01",
    "2011-08-01",
    "2012-06-01",
)
LEFT_OUT = re.compile(r"no lot fits the risk limits: ([A-Z, ]+)")


def ten_cycles_story(cli: Cli, where: Path) -> list[Block]:
    rows, left_out = [], 0
    statuses: dict[str, int] = {}
    for as_of in TEN_DATES:
        out = json.loads(cli("run", "--symbols", "AAPL,MSFT,IBM,GOOG", "--as-of", as_of, "--json").out)
        c = out["contracts"]
        winners = ", ".join(_winner(r) for r in c["DEBATE"]["results"])
        executing = c.get("EXECUTING") or {}
        orders = ", ".join(f"{o['side']} {o['quantity']:g} {o['symbol']}" for o in c["DECIDING"]["orders"])
        execution = executing.get("status", "—") + (f": {orders}" if orders else "")
        found = LEFT_OUT.search(c["DECIDING"]["rationale"])
        left_out += bool(found)
        checks = c["VALIDATING"]
        failed = next(
            (f"{k['name']} {k.get('symbol') or ''}".strip() for k in checks["checks"] if not k["passed"]), "—"
        )
        rows.append(
            f"| {as_of} | {out['status']} | {winners} | {execution} | {found.group(1) if found else '—'} "
            f"| {'passed' if checks['passed'] else 'failed: ' + failed} |"
        )
        statuses[out["status"]] = statuses.get(out["status"], 0) + 1
    table = [
        "| as-of | status | debate winners (conviction: model → calibrated) | execution | "
        "left out by the sizer (no whole lot fits) | risk checks |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    summary = (
        f"{len(TEN_DATES)} cycles: "
        + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        + f"; a thesis left out by the sizer on {left_out} of them."
    )
    return [Block("ten-cycles", "\n".join(table) + "\n\n" + summary)]


def _winner(r: dict) -> str:
    if r["winner"] == "NONE":
        return f"{r['symbol']} none"
    raw, final = r.get("raw_conviction"), r["conviction"]
    return f"{r['symbol']} {r['winner']} " + (
        f"{raw:g} → {final:g}" if raw is not None and raw != final else f"{final:g}"
    )


# ---------------------------------------------------------------------------------------------------------------
# docs/usage.md: one session of three cycles — the book, the listing, its deletion; docs/memory.md: its verified
# replay and a recall

BOOK_DATES = ("2012-03-01", "2012-03-06", "2012-03-07")
EXIT_WORDS = {"stop": "on {its} stop{s}", "target": "at {its} target{s}", "horizon": "at {its} horizon{s}"}


def book_story(cli: Cli, where: Path) -> list[Block]:
    symbols = "AAPL,MSFT,IBM,GOOG"
    first = cli("run", "--symbols", symbols, "--as-of", BOOK_DATES[0], "--json")
    sid = first.session()
    cli.labels.add(sid, standin("book"))
    outs = [json.loads(first.out)] + [
        json.loads(cli("run", "--symbols", symbols, "--as-of", d, "--session", sid, "--json").out)
        for d in BOOK_DATES[1:]
    ]
    story = "; ".join(_what_happened(o, held_before=_held_before(outs, i)) for i, o in enumerate(outs))
    portfolio = cli("portfolio", sid, columns=130)
    sessions = cli("sessions", columns=130)
    verify = cli("replay", sid, "--verify")
    events = [json.loads(line) for line in cli("events", sid).out.splitlines()]
    retrieval = _retrieval(events, cycle=f"{sid}:c3", agent="technical", symbol="AAPL")
    delete = cli("sessions", "delete", sid, "--force", "--by", "alice")
    gone = cli("replay", sid, "--check-chain", ok=2)
    return [
        Block("book-story", story),
        Block("book-portfolio", fence(cli.shown(portfolio))),
        Block("book-sessions", fence(cli.shown(sessions)), masks=("clock", "size")),
        Block("book-verify", fence(cli.shown(verify))),
        Block("book-retrieval", fence(cli.labels.apply(retrieval))),
        Block("book-delete", fence(cli.shown(delete) + "\n" + cli.shown(gone)), masks=("clock", "chain", "size")),
    ]


def _held_before(outs: list[dict], i: int) -> set[str]:
    """The symbols the session bought before its cycle i."""
    return {
        t["symbol"]
        for o in outs[:i]
        for t in (o["contracts"].get("EXECUTING") or {}).get("result", {}).get("executed_trades", [])
        if t["side"] == "BUY"
    }


def _what_happened(out: dict, held_before: set[str]) -> str:
    """One cycle in words, from its contracts: "2012-03-06 closes AAPL and GOOG on their stops and buys MSFT"."""
    c = out["contracts"]
    parts = []
    by_reason: dict[str, list[str]] = {}
    for e in c["SCANNING"]["exits"]:
        by_reason.setdefault(e["reason"], []).append(e["symbol"])
    for reason, syms in by_reason.items():
        many = len(syms) > 1
        parts.append(
            f"closes {_and(syms)} "
            + EXIT_WORDS.get(reason, "({reason})").format(
                its="their" if many else "its", s="s" if many else "", reason=reason
            )
        )
    sells = [o["symbol"] for o in c["DECIDING"]["orders"] if o["side"] == "SELL"]
    buys = [o["symbol"] for o in c["DECIDING"]["orders"] if o["side"] == "BUY"]
    if sells:
        parts.append(f"sells {_and(sells)}")
    if buys:
        again = all(b in held_before for b in buys)
        parts.append(f"buys {_and(sorted(buys))}" + (" again" if again else ""))
    return f"{c['SCANNING']['as_of']} {_and(parts or ['holds'])}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _retrieval(events: list[dict], *, cycle: str, agent: str, symbol: str) -> str:
    """One agent's `retrieval` event, hit by hit, and the notes its prompt received (the request it parents)."""
    from schemas.events import LlmRequestEvent, RetrievalEvent, parse_event

    typed = [parse_event(e) for e in events]
    ev = next(
        e
        for e in typed
        if isinstance(e, RetrievalEvent)
        and e.cycle_id == cycle
        and e.payload.agent == agent
        and e.payload.symbol == symbol
    )
    p = ev.payload
    lines = [
        f"retrieval event seq {ev.seq} ({ev.state}, agent {agent}, {symbol})",
        f"query  {json.dumps(p.query)}",
        f"filter {json.dumps(p.filter)}",
    ]
    width = max(len(h["memory_id"]) for h in p.hits)
    for i, h in enumerate(p.hits, 1):
        outcome = f"{h['outcome'] or ''} {h['signal'] or ''}".strip()
        lines.append(
            f"{i:>2}. {h['memory_id']:<{width}}  known {h['known_at']}  {outcome:<16}  "
            f"bm25 {h['bm25_rank']} dense {h['dense_rank']}  score {h['score']}"
        )
    request = next(e for e in typed if isinstance(e, LlmRequestEvent) and e.parent_run_id == ev.run_id)
    prompt = "\n".join(
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in request.payload.messages
    )
    start = prompt.index("Relevant past notes:")
    notes = prompt[start : prompt.index("<EVIDENCE>", start)].rstrip("\n")
    lines += ["", *[w for line in notes.split("\n") for w in (textwrap.wrap(line, 116) or [""])]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# docs/telemetry.md: OpenTelemetry, live and after the fact, and a collector that is down


def otel_story(cli: Cli, where: Path) -> list[Block]:
    from graph.services.telemetry.tree import render
    from tests.fakes.otlp_receiver import OtlpReceiver  # the tests' loopback collector: decodes the protobuf

    with OtlpReceiver() as receiver:
        cli.labels.add(receiver.endpoint, "http://127.0.0.1:4318")
        live = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        run = cli("run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--json", env=live)
        sid = run.session()
        cli.labels.add(sid, standin("otel"))
        later = cli("export", "otel", sid, env=live)
        sent_live, sent_later = receiver.requests[0], receiver.requests[1]
    if sent_live != sent_later:
        raise RuntimeError(
            "the live export and `export otel` sent different spans: docs/telemetry.md says they are equal"
        )
    export = cli.labels.apply(
        "\n".join(
            [
                "export OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318     # Jaeger/Tempo/Collector; Langfuse, Phoenix: "
                "see below",
                "tradegraph run --symbols AAPL --as-of 2012-06-01            # sent live as the cycle ends",
                f"tradegraph export otel {sid}                        # or later, again: the same trace and span ids",
                later.out.strip(),
            ]
        )
    )
    tree = cli.labels.apply(render(sent_live))  # now: the port the dead collector gets below may be the same

    dead = f"http://127.0.0.1:{free_port()}"
    cli.labels.add(dead, "http://127.0.0.1:9")
    down = cli(
        "run",
        "--symbols",
        "AAPL",
        "--as-of",
        "2012-06-01",
        "--json",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": dead, "OTEL_EXPORTER_OTLP_TIMEOUT": "2"},
    )
    cli.labels.add(down.session(), standin("otel-down"))
    no_endpoint = cli("export", "otel", sid, ok=2)
    refused = cli("export", "otel", sid, "--endpoint", dead, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}, ok=1)
    transcript = "\n".join(
        [
            cli.shown(down, prefix=f"OTEL_EXPORTER_OTLP_ENDPOINT={dead} OTEL_EXPORTER_OTLP_TIMEOUT=2 ", out=False),
            f"(exit {down.rc}, status {json.loads(down.out)['status']})",
            cli.shown(no_endpoint, comment=f"exit {no_endpoint.rc}"),
            cli.shown(refused, prefix="OTEL_EXPORTER_OTLP_TIMEOUT=1 ", comment=f"exit {refused.rc}"),
        ]
    )
    return [
        Block("otel-export", "```bash\n" + export + "\n```"),
        Block("otel-spans", str(len(sent_live))),
        Block("otel-tree", fence(tree), masks=("span",)),
        Block("otel-down", fence(cli.labels.apply(transcript)), masks=("wait",)),
    ]


# ---------------------------------------------------------------------------------------------------------------
# docs/configuration.md: configuration errors, before anything opens

BAD_CONFIG = (
    ({"TRADEGRAPH_STARTING_CASH": "1e99"}, ("run", "--symbols", "AAPL", "--as-of", "2012-06-01")),
    ({"TRADEGRAPH_FEES_BPS": "-5"}, ("backtest", "--symbols", "AAPL", "--start", "2012-06-01", "--end", "2012-06-08")),
    ({"TRADEGRAPH_LLM": "openai"}, ("run", "--symbols", "AAPL", "--as-of", "2012-06-01")),
    (
        {"TRADEGRAPH_QUICK_MODEL": "anthropic:claude-haiku-4-5", "TRADEGRAPH_DEEP_MODEL": "anthropic:claude-opus-4-5"},
        ("run", "--symbols", "AAPL", "--as-of", "2012-06-01"),
    ),
    ({"MONGODB_URI": "redis://u:pw@h"}, ("run", "--symbols", "AAPL", "--as-of", "2012-06-01")),
)


def config_errors_story(cli: Cli, where: Path) -> list[Block]:
    shown = []
    for env, argv in BAD_CONFIG:
        r = cli(*argv, env=env, ok=2)
        shown.append(cli.shown(r, prefix=" ".join(f"{k}={v}" for k, v in env.items()) + " "))
    return [Block("config-errors", fence("\n".join(shown)))]


# ---------------------------------------------------------------------------------------------------------------


def generate() -> list[Block]:
    """Every block, from one run of every story, each in a store of its own, in a temporary folder removed after."""
    # short real paths, whatever $TMPDIR is: rich must not break a path inside a line (`rewrapped`)
    with tempfile.TemporaryDirectory(prefix="tgdocs-", dir="/tmp" if Path("/tmp").is_dir() else None) as name:
        tmp = Path(name).resolve()
        if len(str(tmp)) > 40:
            raise RuntimeError(f"the temporary folder {tmp} is too long a path for the outputs to wrap as shown")
        labels = Labels()
        labels.add(ROOT, "~/tradegraph")
        return [
            block
            for story in STORIES
            for block in _in_store(story, tmp / story.__name__.removesuffix("_story"), labels)
        ]


def _in_store(story, where: Path, labels: Labels) -> list[Block]:
    """A story in the per-user store, as a reader with nothing set has it ($XDG_DATA_HOME, shown as the usual
    ~/.local/share), kept running between its commands."""
    from database.embedded import project_home

    (where / "cwd").mkdir(parents=True)
    if project_home(where) is not None:  # a `.tradegraph` above the temporary folder would be used instead
        raise RuntimeError(f"a project store {project_home(where)} lies above {where}: the examples would run in it")
    labels.add(where / "xdg", "/home/you/.local/share")
    cli = Cli(clean_env(XDG_DATA_HOME=str(where / "xdg")), where / "cwd", labels)
    cli("store", "start")
    try:
        return story(cli, where)
    finally:
        cli("store", "stop", ok=None)


STORIES = (
    approval_story,
    ten_cycles_story,
    book_story,
    otel_story,
    config_errors_story,
    stockbench_story,
    own_data_story,
    stockbench_offline_story,
)
