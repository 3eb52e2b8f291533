"""One self-contained HTML page for a reconstructed session: inline CSS and JS, no external URL,
so it can be attached to a ticket or opened offline. A timeline per cycle, one panel per state,
prompts and contracts inside <details> that fold open."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from graph.machine.manifest import summary_line

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
main{padding:16px 24px}.warn{background:#fde8e8;border:1px solid #e0a0a0;padding:8px 12px;margin:6px 0;border-radius:4px}
.ok{color:#1a7f37}.bad{color:#c62828}.muted{color:#6b7280}
.timeline{display:flex;flex-wrap:wrap;gap:4px;margin:8px 0 14px}
.timeline a{display:block;padding:6px 10px;border-radius:4px;background:#dbe4ff;color:#1d2330;text-decoration:none;font-size:12px}
.timeline a.err{background:#fbd0d0}.timeline a.end{background:#d1f0d8}
.cycle{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:10px 16px;margin-bottom:18px}
.state{border-left:4px solid #6b8afd;margin:10px 0;padding:4px 12px;background:#fafbfc}
.state.err{border-left-color:#c62828}
details{margin:4px 0}summary{cursor:pointer}pre{white-space:pre-wrap;word-break:break-word;background:#f0f2f5;
padding:8px;border-radius:4px;margin:4px 0;max-height:480px;overflow:auto;font-size:12px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #dde1e7;padding:3px 8px;text-align:left;font-size:12px}
.msg{margin:4px 0 4px 8px}.role{font-weight:600;text-transform:uppercase;font-size:11px;color:#555}
button{margin-right:6px}code{font-size:12px;word-break:break-word}
.overview td,.overview th{font-size:13px}.overview{background:#fff;margin:0 0 16px}
.trade,.nowrap{white-space:nowrap}.buy{color:#1a7f37;font-weight:600}.sell{color:#c62828;font-weight:600}
"""

_JS = """
function setAll(open){document.querySelectorAll('details').forEach(function(d){d.open=open;});}
document.addEventListener('DOMContentLoaded',function(){
  var f=document.getElementById('filter');
  f.addEventListener('input',function(){var q=f.value.toLowerCase();
    document.querySelectorAll('.state').forEach(function(s){
      s.style.display=(!q||s.textContent.toLowerCase().indexOf(q)>=0)?'':'none';});});
});
"""


def _j(v: Any) -> str:
    return escape(json.dumps(v, indent=2, default=str, sort_keys=False))


def _text(v: Any) -> str:
    return escape(v if isinstance(v, str) else json.dumps(v, default=str))


def _llm(call) -> str:
    asks = call.structured_output or (("tools: " + ", ".join(call.tools)) if call.tools else "prose")
    tokens = f"{call.usage.get('input_tokens', '?')} in / {call.usage.get('output_tokens', '?')} out"
    latency = f"{call.latency_ms:.1f} ms" if call.latency_ms is not None else "—"
    status = (
        "<span class=bad>no response recorded</span>"
        if not call.answered
        else f"<span class=bad>error: {escape(call.error)}</span>"
        if call.error
        else "<span class=ok>ok</span>"
    )
    msgs = "".join(
        f"<div class=msg><span class=role>{escape(str(m.get('type')))}</span><pre>{_text(m.get('content'))}"
        + (f"\n\ntool_calls: {_j(m['tool_calls'])}" if m.get("tool_calls") else "")
        + "</pre></div>"
        for m in call.messages
    )
    answer = _text(call.text) if call.text else ""
    if call.tool_calls:
        answer += ("\n" if answer else "") + "tool_calls: " + _j(call.tool_calls)
    return (
        f"<details><summary>LLM call seq {call.seq} · {escape(call.model or '?')} · {escape(asks)} · {tokens} · "
        f"{latency} · {status}</summary><details><summary>prompt ({len(call.messages)} messages)</summary>{msgs}"
        f"</details><details open><summary>response</summary><pre>{answer}</pre></details></details>"
    )


def _state_panel(cycle, state: str) -> str:
    errors = [e for e in cycle.errors if e["state"] == state]
    parts = [f"<section class='state{' err' if errors else ''}' id='{escape(cycle.cycle_id)}-{state}'><h3>{state}</h3>"]
    contract = cycle.contracts.get(state)
    if contract:
        parts.append(
            f"<details><summary>contract <b>{escape(str(contract['name']))}</b> (seq {contract['seq']})"
            f"</summary><pre>{_j(contract['data'])}</pre></details>"
        )
    else:
        parts.append("<p class=muted>no contract recorded</p>")
    parts += [_llm(c) for c in cycle.llm_calls if c.state == state]
    tools = [t for t in cycle.tool_calls if t.state == state]
    if tools:
        rows = "".join(
            f"<tr><td>{t.seq}</td><td>{escape(t.name)}</td><td><code>{_text(t.args)}</code></td><td>"
            + (
                f"<span class=bad>{escape(t.error)}</span>"
                if t.error
                else "<span class=bad>no result</span>"
                if not t.answered
                else f"<details><summary>result</summary><pre>{_j(t.result)}</pre></details>"
            )
            + "</td></tr>"
            for t in tools
        )
        parts.append(f"<table><tr><th>seq</th><th>tool</th><th>args</th><th>result</th></tr>{rows}</table>")
    vals = [v for v in cycle.validations if v["state"] == state]
    if vals:
        rows = "".join(
            f"<tr><td>{v['seq']}</td><td>{escape(str(v.get('schema') or v.get('check')))}</td>"
            f"<td class={'ok' if v.get('ok') else 'bad'}>{'ok' if v.get('ok') else 'failed'}</td>"
            f"<td>{escape(str(v.get('error') or v.get('reason') or ''))}</td></tr>"
            for v in vals
        )
        parts.append(f"<table><tr><th>seq</th><th>validation</th><th>result</th><th>detail</th></tr>{rows}</table>")
    for e in errors:
        parts.append(
            f"<div class=warn>error seq {e['seq']}: {escape(str(e.get('type')))}: "
            f"{escape(str(e.get('message') or e.get('reason') or e.get('error') or ''))}</div>"
        )
    parts.append("</section>")
    return "".join(parts)


def _cycle(cycle) -> str:
    links = []
    for t in cycle.transitions:
        to = t["to"] or "?"
        cls = "end" if to == "END" else ("err" if any(e["state"] == to for e in cycle.errors) else "")
        target = f"#{escape(cycle.cycle_id)}-{to}" if to != "END" else "#"
        links.append(
            f"<a class='{cls}' href='{target}'>{escape(t['from'] or '')} → {escape(to)}"
            f"<br><span class=muted>seq {t['seq']}</span></a>"
        )
    trades = ""
    if cycle.trades:
        rows = "".join(
            f"<tr><td>{escape(str(x.get('symbol')))}</td><td>{escape(str(x.get('side')))}</td>"
            f"<td>{x.get('quantity')}</td><td>{x.get('price')}</td><td>{x.get('fees')}</td></tr>"
            for x in cycle.trades
        )
        trades = (
            f"<h3>executed trades</h3><table><tr><th>symbol</th><th>side</th><th>qty</th><th>price</th>"
            f"<th>fees</th></tr>{rows}</table>"
        )
    cut = (
        "<p class=muted>waiting for human approval before EXECUTING</p>"
        if cycle.paused
        else "<div class=warn>cut off: no transition to END was recorded</div>"
        if cycle.cut_off
        else ""
    )
    for a in cycle.approvals:  # at EXECUTING's gate: a rejected cycle never enters EXECUTING, so said here
        said = f": {escape(str(a['comment']))}" if a.get("comment") else ""
        cut += (
            f"<p>human decision (seq {a['seq']}): <span class={'ok' if a['approved'] else 'bad'}>"
            f"{'approved' if a['approved'] else 'rejected'}</span> by {escape(str(a['by']))}{said}</p>"
        )
    if cycle.manifest:
        cut += (
            f"<details><summary>ran with: {escape(summary_line(cycle.manifest))}</summary>"
            f"<pre>{_j(cycle.manifest)}</pre></details>"
        )
    return (
        f"<div class=cycle id='cycle-{cycle.index}'><h2>cycle {cycle.index}: {escape(cycle.cycle_id)} · status "
        f"<span class={'bad' if cycle.status in ('failed', 'cut_off') else 'ok'}>{escape(cycle.status)}</span>"
        f"</h2><p class=muted>seq {cycle.first_seq}..{cycle.last_seq} · {cycle.events} events · "
        f"{len(cycle.llm_calls)} LLM calls · {cycle.tokens['total_tokens']} tokens</p>{cut}"
        f"<div class=timeline>{''.join(links)}</div>"
        + "".join(_state_panel(cycle, s) for s in cycle.states)
        + trades
        + "</div>"
    )


def _trade(x: dict) -> str:
    side = str(x.get("side") or "").lower()
    qty = x.get("quantity")
    qty = f"{qty:g}" if isinstance(qty, (int, float)) else escape(str(qty))
    return (
        f"<span class=trade><span class={'buy' if side == 'buy' else 'sell'}>{escape(side.upper())}</span> "
        f"{qty} {escape(str(x.get('symbol')))} @ {_num(x.get('price'))}</span>"
    )


def _num(v) -> str:
    return f"{v:,.2f}" if isinstance(v, (int, float)) else escape(str(v))


def _doubted(session) -> bool:
    return session.chain is not None and not session.chain["ok"]


def _doubt_mark(session) -> str:
    """A status read from a log that fails its chain is what the log says now, not what the runner recorded."""
    return " (hash chain broken: not vouched for)" if _doubted(session) else ""


def _overview(session) -> str:
    """One row per cycle: what happened, before the details."""
    rows = []
    for c in session.cycles:
        path = " → ".join(["START"] + [escape(t["to"]) for t in c.transitions if t["to"]])
        trades = ", ".join(_trade(x) for x in c.trades) or "<span class=muted>none</span>"
        status_cls = "bad" if c.status in ("failed", "cut_off") or _doubted(session) else "ok"
        rows.append(
            f"<tr><td><a href='#cycle-{c.index}'>{c.index}</a></td><td class=nowrap>{escape(c.cycle_id)}</td>"
            f"<td class={status_cls}>{escape(c.status)}{_doubt_mark(session)}</td><td>{path}</td>"
            f"<td>{len(c.llm_calls)}</td>"
            f"<td>{c.tokens['total_tokens']}</td><td>{len(c.tool_calls)}</td><td>{trades}</td></tr>"
        )
    return (
        "<table class=overview><tr><th>#</th><th>cycle</th><th>status</th><th>path</th><th>LLM calls</th>"
        "<th>tokens</th><th>tool calls</th><th>executed trades</th></tr>" + "".join(rows) + "</table>"
    )


def render_html(session) -> str:
    warnings = "".join(f"<div class=warn>{escape(w)}</div>" for w in session.warnings())
    integrity = "<span class=ok>gap-free</span>" if session.gap_free else "<span class=bad>seq gaps</span>"
    if session.chain is not None:
        integrity += (
            " · hash chain <span class=ok>intact</span>"
            if session.chain["ok"]
            else f" · hash chain <span class=bad>broken at seq {session.chain['first_broken']['seq']}</span>"
        )
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>tradegraph replay "
        f"{escape(session.session_id)}</title><style>{_CSS}</style><script>{_JS}</script></head><body>"
        f"<header><h1>tradegraph session {escape(session.session_id)}</h1>"
        f"<div>{session.events} events · {len(session.cycles)} cycle(s) · seq {integrity}"
        + (f" · replay of {escape(session.replay_of)}" if session.replay_of else "")
        + "</div></header><main>"
        f"<p><button onclick='setAll(true)'>expand all</button><button onclick='setAll(false)'>collapse all"
        f"</button><input id=filter placeholder='filter states…'></p>{warnings}{_overview(session)}"
        + "".join(_cycle(c) for c in session.cycles)
        + "</main></body></html>"
    )
