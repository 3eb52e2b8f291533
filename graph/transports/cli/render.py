"""Human output: the cycle summary as an approval screen, and the feature bundle table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.pricing import dollars
from schemas.states import STATES


def _console() -> Console:
    return Console(width=110, highlight=False)


def print_cycle(out, console: Console | None = None) -> None:
    c = console or _console()
    k = out.contracts
    c.print(f"[bold]tradegraph cycle[/bold] {out.cycle_id}  status: [bold]{out.status}[/bold]")
    states = Table(title="States", show_header=True)
    states.add_column("state")
    states.add_column("outcome")
    for s in STATES:
        states.add_row(s, _state_outcome(s, k.get(s), out))
    c.print(states)
    if "ANALYZING" in k:
        panel = Table(title="Analyst panel")
        for col in ("symbol", "analyst", "stance", "confidence", "model", "note"):
            panel.add_column(col)
        for p in k["ANALYZING"]["panels"]:
            for n in p["notes"]:
                panel.add_row(
                    p["symbol"],
                    n["analyst"],
                    f"{n['stance']:+.2f}",
                    f"{n['confidence']:.2f}",
                    n["model_used"] + (" (self-critiqued)" if n.get("self_critiqued") else ""),
                    n["summary"][:60],
                )
        c.print(panel)
    if "DEBATE" in k:
        d = Table(title="Debate")
        for col in ("symbol", "winner", "conviction (model → calibrated)", "opposition"):
            d.add_column(col)
        for r in k["DEBATE"]["results"]:
            d.add_row(
                r["symbol"],
                r["winner"],
                f"{r['raw_conviction']:.2f} → {r['conviction']:.2f}",
                f"{r['opposition_share']:.0%}",
            )
        c.print(d)
    if "DECIDING" in k:
        t = Table(title="Theses (prices set by code)")
        for col in ("symbol", "direction", "entry", "stop", "target", "ATR14", "source"):
            t.add_column(col)
        for th in k["DECIDING"]["theses"]:
            t.add_row(
                th["symbol"],
                th["direction"],
                f"{th['entry']}",
                f"{th['stop']}",
                f"{th['target']}",
                f"{th['atr14']}",
                th["price_source"],
            )
        c.print(t)
        orders = k["DECIDING"]["orders"]
        c.print(
            "Orders: " + (", ".join(f"{o['side']} {o['quantity']:g} {o['symbol']}" for o in orders) or "none (hold)")
        )
    if "VALIDATING" in k:
        v = Table(title="Risk checks")
        for col in ("", "check", "symbol", "value", "limit", "detail"):
            v.add_column(col)
        for ch in k["VALIDATING"]["checks"]:
            v.add_row(
                "✓" if ch["passed"] else "✗",
                ch["name"],
                ch.get("symbol") or "",
                "" if ch["value"] is None else f"{ch['value']:g}",
                "" if ch["limit"] is None else f"{ch['limit']:g}",
                ch["detail"],
            )
        c.print(v)
    for ex in (k.get("SCANNING") or {}).get("exits", []):
        c.print(
            f"Closed on its {ex['reason']}: SELL {ex['quantity']:g} {ex['symbol']} @ {ex['exit_price']:.4f} on "
            f"{ex['closed']} (P&L {ex['realized_pnl']:+.2f})"
        )
    if "EXECUTING" in k:
        ex = k["EXECUTING"]
        trades = ex["result"]["executed_trades"]
        c.print(f"Execution: {ex['status']}" + (f" — {ex['result']['message']}" if ex["result"]["message"] else ""))
        for tr in trades:
            c.print(f"  {tr['side']} {tr['quantity']:g} {tr['symbol']} @ {tr['price']:.4f} (fees {tr['fees']:.2f})")
    notes_table(getattr(out, "notes", []), c)
    if "MEMORIZING" in k and k["MEMORIZING"].get("reviews"):
        for rv in k["MEMORIZING"]["reviews"]:
            c.print(
                f"Review {rv['symbol']}: {rv['outcome']} ({rv['signal_evolution']}), P&L {rv['realized_pnl']:+.2f} "
                f"— {rv['thesis_vs_outcome']}"
            )
    if out.status == "pending_approval":
        c.print(
            f"[bold yellow]Waiting for approval[/bold yellow]: tradegraph approve {out.session_id} "
            f"(or --reject); nothing has executed"
        )
    if out.error:
        c.print(f"[red]error in {out.error.get('state')}: {out.error.get('message')}[/red]")
    if (out.cost or {}).get("by_state"):
        c.print(spend_table(out.cost))
    tok = out.tokens or {}
    cached = f" (+{out.cached_calls} cached)" if getattr(out, "cached_calls", 0) else ""
    cost = f"  cost: {dollars(out.cost)}" if out.cost else ""
    c.print(
        f"events: {out.events}  llm calls: {out.llm_calls}{cached}  tokens: {tok.get('total_tokens', 0)}{cost}  "
        f"session: {out.session_id}"
    )


def spend_table(spend: dict[str, Any], title: str = "LLM spend by state") -> Table:
    """Tokens and dollars per state (agent/pricing.py Spend.as_dict): the approval screen, replay and backtest."""
    t = Table(title=title)
    for col in ("state", "calls", "cached", "tokens in", "of which cached", "tokens out", "of which reasoning", "cost"):
        t.add_column(col, justify="left" if col == "state" else "right")
    rows = [
        (s, spend["by_state"][s])
        for s in [*STATES, *sorted(set(spend["by_state"]) - set(STATES))]
        if s in spend["by_state"]
    ]
    for name, v in rows + [("total", spend)]:
        estimated = f" (~{v['estimated_calls']} estimated)" if v.get("estimated_calls") else ""
        t.add_row(
            name,
            str(v.get("calls", 0)),
            str(v.get("cached_calls", 0)),
            f"{v.get('input_tokens', 0)}{estimated}",
            str(v.get("cached_tokens", 0)),
            str(v.get("output_tokens", 0)),
            str(v.get("reasoning_tokens", 0)),
            dollars(v),
        )
    return t


def notes_table(retrievals: list[dict], c: Console) -> None:
    """One row per recalled memory: which agents were given it, its tags and its text."""
    given: dict[str, dict] = {}
    for r in retrievals:
        for h in r.get("hits") or []:
            row = given.setdefault(h["memory_id"], {"hit": h, "agents": []})
            row["agents"].append(f"{r['agent']} (#{r['hits'].index(h) + 1})")
    if not given:
        return
    nt = Table(title=f"Past notes given to agents: {len(given)} memories, recalled point in time", show_lines=True)
    for col in ("memory", "known", "tags", "given to (rank)", "note"):
        nt.add_column(col)
    for mid, row in sorted(given.items(), key=lambda kv: kv[1]["hit"]["known_at"]):
        h = row["hit"]
        tags = " ".join(x for x in (h.get("symbol"), h.get("direction"), h.get("outcome"), h.get("signal")) if x)
        nt.add_row(escape(mid), h["known_at"], tags or h["kind"], ", ".join(row["agents"]), escape(h["text"][:160]))
    c.print(nt)


def _state_outcome(state: str, contract: dict[str, Any] | None, out) -> str:
    if contract is None:
        if out.error and out.error.get("state") == state:
            return f"✗ {out.error['type']}: {out.error['message'][:70]}"
        return "—"
    if state == "SCANNING":
        return ", ".join(f"{s['symbol']} {s['price']}" for s in contract["snapshots"])
    if state == "PLANNING":
        return contract["objective"][:90]
    if state == "ANALYZING":
        return ", ".join(f"{p['symbol']}: {len(p['notes'])}/4 notes" for p in contract["panels"])
    if state == "DEBATE":
        return ", ".join(f"{r['symbol']} {r['winner']} {r['conviction']:.2f}" for r in contract["results"])
    if state == "DECIDING":
        return f"{len(contract['orders'])} order(s)"
    if state == "VALIDATING":
        failed = sum(not c["passed"] for c in contract["checks"])
        return "passed" if contract["passed"] else f"rejected ({failed} check(s) failed)"
    if state == "EXECUTING":
        return contract["status"]
    return contract["summary"][:90]


def print_bundle(bundle, console: Console | None = None) -> None:
    c = console or _console()
    c.print(f"[bold]{bundle.symbol}[/bold] as of {bundle.as_of}" + ("  (fallback bundle)" if bundle.fallback else ""))
    t = Table(title="Technical")
    t.add_column("indicator")
    t.add_column("value", justify="right")
    for name, value in bundle.technical.model_dump().items():
        t.add_row(name, "— (warm-up)" if value is None else f"{value:g}")
    c.print(t)
    n = bundle.news
    c.print(
        f"News: {n.unique_count} unique item(s), {n.duplicates_removed} duplicate(s) removed, "
        f"net sentiment {n.net_sentiment:+.3f}"
    )
    for item in n.items[:8]:
        c.print(
            f"  {item.published_at[:10]} [{item.event_class}] {item.sentiment:+.2f} w={item.recency_weight:.2f} "
            f"{item.headline[:70]}"
        )
    f = bundle.fundamentals
    c.print(
        "Fundamentals: "
        + (
            "unavailable (no source wired)"
            if not f.available
            else f"P/E {f.pe}, P/B {f.pb}, EV/EBITDA {f.ev_ebitda}, growth {f.revenue_growth_pct}%, "
            f"margin {f.net_margin_pct}% ({f.source}, {f.as_of})"
        )
    )
    if bundle.forecast:
        fc = bundle.forecast
        c.print(
            f"Forecast (evidence only): {fc.expected_move_pct:+.2f}% over {fc.horizon_days} days, "
            f"band {fc.band_low_pct:+.2f}% .. {fc.band_high_pct:+.2f}%"
        )
