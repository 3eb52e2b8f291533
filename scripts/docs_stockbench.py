"""docs/stockbench.md's offline scorecard: the full offline run, kept as the scorecard it printed, and the block of
the guide drawn from it.

    .venv/bin/python scripts/docs_stockbench.py      # run the full offline benchmark again (minutes) and keep it

The run is `tradegraph benchmark stockbench --json` with nothing configured (the offline model answers), on a fresh
embedded store in a temporary folder; its scorecard is written to docs/stockbench/offline-scorecard.json (the data
path made relative to the repository). `make docs` renders the guide's table, paired test and sub-periods from that
file (scripts/docs_examples.py), so the guide says what the file says; tests/unit/test_stockbench_shipped.py
recomputes every figure in the file from the NAVs it ships and checks its first sessions against today's code.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCORECARD = ROOT / "docs" / "stockbench" / "offline-scorecard.json"
COMMAND = "tradegraph benchmark stockbench --json"


def run_offline(out: Path = SCORECARD) -> dict[str, Any]:
    """The full offline benchmark, run now in a store of its own; its scorecard written to `out`."""
    sys.path.insert(0, str(ROOT))
    from graph.transports.cli.main import main

    with tempfile.TemporaryDirectory(prefix="tg-docs-sb-") as tmp:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TRADEGRAPH_", "OPENAI_", "ANTHROPIC_", "GOOGLE_", "OLLAMA_", "MONGODB_"))
        }
        env["TRADEGRAPH_HOME"] = str(Path(tmp) / "home")
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                code = main(
                    [
                        "benchmark",
                        "stockbench",
                        "--json",
                        "--no-progress",
                        "--out",
                        str(Path(tmp) / "exp"),
                        "--benchmark-id",
                        "offline-docs",
                    ]
                )
        finally:
            os.environ.clear()
            os.environ.update(saved)
    if code != 0:
        raise SystemExit(f"tradegraph benchmark stockbench exited {code}")
    card = json.loads(printed.getvalue())
    card["data"] = str(Path(card["data"]).resolve().relative_to(ROOT))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    return card


def load(path: Path = SCORECARD) -> dict[str, Any]:
    return json.loads(path.read_text())


def _pct(v: float, digits: int = 2) -> str:
    return f"{v * 100:+.{digits}f}%".replace("-", "−")


def _period(f: dict[str, Any]) -> str:
    return f"{_pct(f['cumulative_return'])} / {_pct(f['max_drawdown'])}"


def offline_block(card: dict[str, Any]) -> str:
    """The guide's table (runs and the buy-and-hold, with the sub-periods) and each run's paired test, labelled
    with what answered."""
    runs = [r for r in card["rows"] if r["kind"] == "run"]
    (base,) = [r for r in card["rows"] if r["kind"] == "baseline"]
    w = card["window"]
    models = list(dict.fromkeys(c["model"] for r in runs for c in r.get("cutoffs") or []))
    seen = {r.get("may_have_seen_window") for r in runs}
    if any(c["known"] is not True or c["cutoff"] is not None for r in runs for c in r.get("cutoffs") or []) or seen != {
        False
    }:
        raise RuntimeError(f"{SCORECARD.name}: a run not answered by the offline model; the block says it was")
    lines = [
        f"`{COMMAND}` ({len(card['symbols'])} symbols, {w['start']}..{w['end']}, {w['sessions']} sessions). "
        f"What answered: {'/'.join(models)} (tradegraph's offline rule-based model, trained on nothing: "
        f"`may_have_seen_window: {json.dumps(seen.pop() if len(seen) == 1 else None)}`); "
        f"{len(runs)} run{'s' if len(runs) != 1 else ''} (n={len(runs)}: the offline model is deterministic, so "
        f"there is no standard deviation). Look-ahead audit: {card['lookahead']['leaks']} leaks in "
        f"{card['lookahead']['cycles']:,} cycles.",
        "",
        "| row | return | max DD | Sortino | Mar–Apr return / DD | May–Jun return / DD |",
        "|---|---|---|---|---|---|",
    ]
    for r in [*runs, base]:
        name = r["name"] + (
            f", net of its entry cost (gross {_pct(r['gross_cumulative_return'], 3)})"
            if r["kind"] == "baseline"
            else ""
        )
        sub = r["sub_periods"]
        lines.append(
            f"| {name} | {_pct(r['cumulative_return'], 3)} | {_pct(r['max_drawdown'])} | "
            f"{r['sortino']:.4f} | {_period(sub['downturn (Mar-Apr)'])} | {_period(sub['upturn (May-Jun)'])} |"
        )
    for r in runs:
        t = r["vs_buy_and_hold"]
        lo, hi = t["ci95"]
        lines += [
            "",
            f"Paired test of {r['name']}'s daily excess returns over the buy-and-hold ({t['sessions']} "
            f"sessions; {t['method'].split('; ', 1)[1]}): mean {_pct(t['mean'], 4)} a day, 95% bootstrap "
            f"interval [{_pct(lo, 3)}, {_pct(hi, 3)}], p = {t['p_value']:.2f}.",
        ]
    return "\n".join(
        line if line.startswith("|") else textwrap.fill(line, 118, break_on_hyphens=False, break_long_words=False)
        for line in lines
    )


def offline_story(cli, where) -> list:
    """scripts/docs_examples.py's story for docs/stockbench.md: the kept full run, not a new one (it takes minutes)."""
    from docs_cli import Block

    return [Block("stockbench-offline", offline_block(load()))]


if __name__ == "__main__":
    card = run_offline()
    print(offline_block(card))
    print(f"written: {SCORECARD.relative_to(ROOT)}")
