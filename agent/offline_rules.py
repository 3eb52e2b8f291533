"""The offline model's reasoning: deterministic rules over the numbers in a prompt's evidence.

Each function reads only the evidence dict the prompt carried, so the offline model decides
from exactly what a real model would have seen. Trend, momentum, volatility and news
sentiment drive stances; different markets give different answers, the same market the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _clip(x: float, lo: float = -1.0, hi: float = 1.0) -> float:
    return max(lo, min(hi, x))


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _r(x: float, nd: int = 2) -> float:
    return round(float(x), nd)


def _cite(block: dict[str, Any], *names: str) -> list[str]:
    return [f"{n}={block[n]}" for n in names if block.get(n) is not None]


# ---------------------------------------------------------------- planning / quant
QUANT_METRICS = ("close", "sma50", "sma200", "rsi14", "macd_hist", "atr14")  # what the quant's answer cites


def plan(ev: dict) -> dict:
    symbols = ev["symbols"]
    limits = ev.get("limits", {})
    return {
        "objective": f"Decide whether to open, hold or exit positions in {', '.join(symbols)} as of {ev['as_of']}, "
        f"risking at most {limits.get('risk_per_trade_pct', 1.0)}% of equity per trade.",
        "assets": symbols,
        "quant_question": "Is the trend (close vs SMA50 vs SMA200) confirmed by momentum (RSI14, MACD histogram), "
        "and how large is ATR14 relative to the close?",
        "timeframes": ["1d"],
        "constraints": {"long_only": True, **{k: v for k, v in limits.items()}},
        "expected_outputs": ["trend", "momentum", "volatility"],
    }


def quant(ev: dict) -> dict:
    """The indicators are the evidence's, or (pass protocol 4) those its tools returned: it states and cites only
    what it has."""
    t = ev["technical"]
    close, sma50, sma200 = t.get("close"), t.get("sma50"), t.get("sma200")
    parts = []
    if sma50 is not None and close is not None:
        parts.append(f"close {'above' if close > sma50 else 'below'} SMA50")
    if sma50 is not None and sma200 is not None:
        parts.append(f"SMA50 {'above' if sma50 > sma200 else 'below'} SMA200")
    if t.get("rsi14") is not None:
        parts.append(f"RSI14 at {t['rsi14']}")
    if t.get("macd_hist") is not None:
        parts.append(f"MACD histogram {'positive' if t['macd_hist'] > 0 else 'negative'}")
    if t.get("atr14") is not None and close is not None:
        parts.append(f"ATR14 {t['atr14']} against a close of {close}")
    return {
        "symbol": ev["symbol"],
        "question": ev["question"],
        "answer": ("; ".join(parts) or "Too little history for indicators") + ".",
        "metrics": {n: t[n] for n in QUANT_METRICS if n in t},
    }


# ---------------------------------------------------------------- analysts
def _technical_view(t: dict) -> tuple[float, float, list[str], dict[str, float]]:
    close = t["close"]
    trend, momentum, points = [], [], []
    for a, b, label in (
        ("close", "sma50", "Close vs SMA50"),
        ("sma50", "sma200", "SMA50 vs SMA200"),
        ("close", "ema20", "Close vs EMA20"),
    ):
        va, vb = t.get(a), t.get(b)
        if va is not None and vb is not None:
            s = _sign(va - vb)
            trend.append(s)
            points.append(f"{label}: {'above' if s > 0 else 'below'} ({a}={va}, {b}={vb})")
    rsi = t.get("rsi14")
    if rsi is not None:
        if rsi > 70:
            momentum.append(-0.5)
            points.append(f"RSI14 overbought at {rsi}")
        elif rsi < 30:
            momentum.append(0.5)
            points.append(f"RSI14 oversold at {rsi}")
        else:
            momentum.append(_clip((rsi - 50) / 20))
            points.append(f"RSI14 {rsi}")
    hist = t.get("macd_hist")
    if hist is not None:
        momentum.append(float(_sign(hist)))
        points.append(f"MACD histogram {'positive' if hist > 0 else 'negative'} (macd_hist={hist})")
    upper, lower = t.get("bb_upper"), t.get("bb_lower")
    if upper is not None and close > upper:
        momentum.append(-0.3)
        points.append(f"Close above the upper Bollinger band ({upper})")
    elif lower is not None and close < lower:
        momentum.append(0.3)
        points.append(f"Close below the lower Bollinger band ({lower})")
    tr = sum(trend) / len(trend) if trend else 0.0
    mo = sum(momentum) / len(momentum) if momentum else 0.0
    stance = _clip(0.6 * tr + 0.4 * mo)
    signs = [_sign(x) for x in trend + momentum]
    agreement = abs(sum(signs)) / len(signs) if signs else 0.0
    coverage = min(1.0, len(signs) / 5)
    confidence = _clip(0.2 + 0.65 * agreement * coverage, 0.0, 1.0)
    return stance, confidence, points, {"trend": _r(tr), "momentum": _r(mo)}


def technical(ev: dict) -> dict:
    t = ev["technical"]
    stance, confidence, points, subs = _technical_view(t)
    word = "bullish" if stance > 0.15 else "bearish" if stance < -0.15 else "neutral"
    return _note(
        ev,
        "technical",
        stance,
        confidence,
        f"Chart set-up is {word}: trend {subs['trend']}, momentum {subs['momentum']}.",
        points,
        subs,
        _cite(t, "close", "sma50", "sma200", "ema20", "rsi14", "macd_hist", "atr14", "bb_upper", "bb_lower"),
    )


def news(ev: dict) -> dict:
    n = ev["news"]
    net, count = n["net_sentiment"], n["unique_count"]
    items = sorted(n["items"], key=lambda i: -i["recency_weight"])[:3]
    points = [f"{i['event_class']} headline, sentiment {i['sentiment']}, weight {i['recency_weight']}" for i in items]
    stance = _clip(1.2 * net)
    confidence = _clip(0.3 + 0.1 * count, 0.0, 0.85)
    word = "supportive" if net > 0.05 else "negative" if net < -0.05 else "mixed"
    return _note(
        ev,
        "news",
        stance,
        confidence,
        f"News flow is {word} (net sentiment {net} over {count} items).",
        points,
        {"net_sentiment": net},
        [i["headline"] for i in items],
    )


def sentiment(ev: dict) -> dict:
    s = ev["sentiment"]
    ns, count = s["news_sentiment"], s["news_items"]
    stance = _clip(0.8 * ns)
    confidence = _clip(0.2 + 0.08 * count, 0.0, 0.6)
    return _note(
        ev,
        "sentiment",
        stance,
        confidence,
        f"News-driven sentiment {ns}; no positioning feed is wired, so confidence stays modest.",
        [f"news_sentiment={ns} from {count} items", "positioning_feed_wired=false"],
        {"news": _r(stance)},
        _cite(s, "news_sentiment", "news_items"),
    )


def fundamental(ev: dict) -> dict:
    f = ev["fundamentals"]
    score, points = 0.0, []
    pe = f.get("pe")
    if pe is not None:
        v = 0.4 if pe < 15 else -0.5 if pe > 35 else -0.3 if pe > 25 else 0.0
        score += v
        points.append(f"P/E {pe}: {'cheap' if v > 0 else 'rich' if v < 0 else 'fair'}")
    g = f.get("revenue_growth_pct")
    if g is not None:
        v = 0.3 if g > 10 else -0.3 if g < 0 else 0.0
        score += v
        points.append(f"Revenue growth {g}%")
    m = f.get("net_margin_pct")
    if m is not None:
        v = 0.2 if m > 20 else -0.2 if m < 5 else 0.0
        score += v
        points.append(f"Net margin {m}%")
    return _note(
        ev,
        "fundamental",
        _clip(score),
        0.55,
        f"Fundamentals score {_r(score)} from the reported ratios.",
        points,
        {"valuation": _r(score)},
        _cite(f, "pe", "pb", "ev_ebitda", "revenue_growth_pct", "net_margin_pct"),
    )


def _note(ev, analyst, stance, confidence, summary, points, subscores, evidence) -> dict:
    return {
        "symbol": ev["symbol"],
        "analyst": analyst,
        "stance": _r(stance),
        "confidence": _r(confidence),
        "summary": summary,
        "key_points": points[:6],
        "subscores": subscores,
        "evidence": evidence[:12],
        "expectation_gap": None,
        "time_horizon": "5-10 sessions",
    }


def critique(ev: dict) -> dict:
    note = dict(ev["note"])
    # a low confidence is kept when the stance is near flat (it is justified); a clear stance with
    # concrete evidence earns a small upgrade, never past the evidence it rests on
    if abs(note["stance"]) >= 0.2 and note.get("evidence"):
        note["confidence"] = _r(min(0.5, note["confidence"] + 0.1))
    note["summary"] = note["summary"] + " Self-critique: reviewed what would flip the stance."
    note.pop("model_used", None)
    note.pop("self_critiqued", None)
    return note


# ---------------------------------------------------------------- debate
def _case(ev: dict, side: str) -> dict:
    notes = ev["notes"]
    sym = ev["symbol"]
    points = [p for n in notes for p in n.get("key_points", [])[:2]] or ev.get("key_points", [])[:4]
    if notes:
        lead = max(notes, key=lambda n: abs(n["stance"]) * n["confidence"])
        arg = (
            f"{len(notes)} analyst(s) lean {'bullish' if side == 'bull' else 'bearish'}; the strongest is the "
            f"{lead['analyst']} analyst at stance {lead['stance']} (confidence {lead['confidence']})."
        )
    else:
        arg = (
            f"No analyst is explicitly {'bullish' if side == 'bull' else 'bearish'} on {sym}; the "
            f"{'long' if side == 'bull' else 'short'} case rests on the panel's key points alone."
        )
    risks = ev.get("opposing_points", [])[:3] or ["The panel may be right against this side."]
    return {"symbol": sym, "side": side, "argument": arg, "supporting_points": points[:5], "risks": risks}


def rebuttal(ev: dict, side: str) -> dict:
    own, other = dict(ev["own_case"]), ev["other_case"]
    answer = other["supporting_points"][0] if other.get("supporting_points") else other["argument"]
    own["supporting_points"] = (own.get("supporting_points", []) + [f"Answer to the {other['side']}: {answer}"])[-5:]
    return own


def manager(ev: dict) -> dict:
    taking = [n for n in ev["notes"] if not n.get("abstained") and abs(n["stance"]) > 0.05]
    weight = sum(n["confidence"] for n in taking)
    score = sum(n["stance"] * n["confidence"] for n in taking) / weight if weight else 0.0
    # a flat panel is no reason to buy: ties go SHORT, which a long-only book reads as stay flat or exit
    winner = "LONG" if score > 0 else "SHORT"
    # conviction grows with the strength of the lean, how sure its analysts are, and how many took a side
    mean_conf = weight / len(taking) if taking else 0.0
    breadth = min(1.0, len(taking) / 3)
    conviction = _clip(0.3 + 0.55 * abs(score) * mean_conf + 0.1 * breadth, 0.0, 0.95)
    bulls = [n["analyst"] for n in taking if n["stance"] > 0]
    bears = [n["analyst"] for n in taking if n["stance"] < 0]
    disagreements = [f"{', '.join(bulls)} lean long while {', '.join(bears)} lean short"] if bulls and bears else []
    falsifiers = (
        ["A close below the recent support", "MACD histogram turning negative"]
        if winner == "LONG"
        else ["A close above the recent resistance", "MACD histogram turning positive"]
    )
    return {
        "symbol": ev["symbol"],
        "winner": winner,
        "conviction": _r(conviction),
        "manager_rationale": f"Confidence-weighted panel stance is {_r(score)} across {len(taking)} side-taking "
        f"analyst(s); the {'bull' if winner == 'LONG' else 'bear'} case is better supported.",
        "key_disagreements": disagreements,
        "falsifiers": falsifiers,
    }


def trader(ev: dict) -> dict:
    d, price = ev["debate"], ev["price"]
    long = d["winner"] == "LONG"
    anchors = ev.get("anchors", {})
    invalidation = []
    if long and anchors.get("support"):
        invalidation.append(f"Daily close below support {anchors['support']}")
    if not long and anchors.get("resistance"):
        invalidation.append(f"Daily close above resistance {anchors['resistance']}")
    invalidation += d.get("falsifiers", [])[:2]
    return {
        "symbol": ev["symbol"],
        "direction": d["winner"],
        "conviction": d["conviction"],
        # prudent placeholder levels; code re-anchors them to ATR whenever ATR allows
        "entry": price,
        "stop": _r(price * (0.95 if long else 1.05), 4),
        "target": _r(price * (1.10 if long else 0.90), 4),
        "horizon_sessions": 10,
        "rationale": f"{d['winner']} per the debate (conviction {d['conviction']}): {d['manager_rationale']}",
        "invalidation_conditions": invalidation or ["The debate's falsifiers"],
        "key_risks": [
            p
            for n in ev.get("notes", [])
            if (n["stance"] < 0) == long and abs(n["stance"]) > 0.05
            for p in n.get("key_points", [])[:1]
        ][:3],
        "expected_horizon": "about two weeks",
    }


def memory(ev: dict) -> dict:
    status = ev["status"]
    decisions = ev.get("decisions", [])
    if status == "rejected":
        lessons = [f"Risk engine rejected the decision: {r}" for r in ev.get("reasons", [])[:2]]
    elif ev.get("trades"):
        lessons = [f"Executed {len(ev['trades'])} trade(s); review them against their stops next cycle."]
    else:
        lessons = ["No trade: the panel did not justify a position change."]
    return {
        "cycle_id": ev["cycle_id"],
        "as_of": ev["as_of"],
        "status": status,
        "summary": f"{ev['as_of']}: cycle {status}; " + ("; ".join(decisions) if decisions else "no orders") + ".",
        "lessons": lessons,
        "decisions": decisions,
        "tags": sorted(set(ev.get("symbols", [])) | {status}),
    }


def reviewer(ev: dict) -> dict:
    r, th = ev["result"], ev["thesis"]
    setup = ", ".join(th.get("setup") or []) or "an unlabelled setup"
    if r["reason"] == "stop":
        critique = (
            f"The {ev['direction']} thesis in {setup} failed: price hit the stop within "
            f"{r['sessions_held']} session(s)."
        )
        lessons = [
            f"In {setup}, wait for confirmation before going {ev['direction'].lower()}; the 2xATR stop "
            f"was reached quickly."
        ]
    elif r["reason"] == "target":
        critique = f"The {ev['direction']} thesis in {setup} played out: the target was reached in {r['sessions_held']} session(s)."
        lessons = [f"{setup} supported a {ev['direction'].lower()} entry; the ATR-based target was realistic."]
    else:
        critique = (
            f"The {ev['direction']} thesis in {setup} closed by {r['reason']} after {r['sessions_held']} "
            f"session(s) at {r['return_pct']}%: neither level was reached."
        )
        lessons = [f"In {setup}, expect slow moves; the horizon ended the trade, not the levels."]
    return {
        "symbol": ev["symbol"],
        "direction": ev["direction"],
        "outcome": r["outcome"],
        "realized_pnl": r["realized_pnl"],
        "signal_evolution": r["signal_evolution"],
        "critique": critique,
        "lessons": lessons,
        "thesis_vs_outcome": "",
        "memory_record": "",
    }


RULES: dict[str, Callable[[dict], dict]] = {
    "planning": plan,
    "quant": quant,
    "analyst:technical": technical,
    "analyst:news": news,
    "analyst:sentiment": sentiment,
    "analyst:fundamental": fundamental,
    "bull_build": lambda ev: _case(ev, "bull"),
    "bear_build": lambda ev: _case(ev, "bear"),
    "bull_rebuttal": lambda ev: rebuttal(ev, "bull"),
    "bear_rebuttal": lambda ev: rebuttal(ev, "bear"),
    "manager": manager,
    "trader": trader,
    "memory": memory,
    "reviewer": reviewer,
}


def answer(task: str, schema_name: str, ev: dict, notes: list[dict] | None = None) -> dict:
    if task.startswith("critique:"):
        return critique(ev)
    rule = RULES.get(task)
    if rule is None:
        raise ValueError(f"offline model has no rule for task {task!r} (schema {schema_name})")
    return heed_notes(task, rule(ev), notes or [])


# how much one recalled falsified setup weighs, and how many count
FALSIFIED_DAMPING = 0.5
MAX_FALSIFIED = 2


def heed_notes(task: str, out: dict, notes: list[dict]) -> dict:
    """The offline model's use of past notes, deterministic and documented (docs/memory.md): each recalled
    review of a LONG whose thesis was Falsified (up to two) halves an analyst's bullish stance and takes 0.1 off
    its confidence, and takes 0.1 off the manager's conviction for LONG. Realized or weakened notes change
    nothing: a loss is the lesson worth acting on."""
    falsified = min(
        MAX_FALSIFIED,
        sum(1 for n in notes if n["kind"] == "review" and n["direction"] == "LONG" and n["signal"] == "Falsified"),
    )
    if not falsified:
        return out
    if task.startswith("analyst:") and out.get("stance", 0) > 0:
        out["stance"] = _r(out["stance"] * FALSIFIED_DAMPING**falsified)
        out["confidence"] = _r(max(0.05, out["confidence"] - 0.1 * falsified))
        out["key_points"] = (
            out["key_points"]
            + [f"{falsified} similar LONG setup(s) in past notes were falsified: bullish stance damped"]
        )[:6]
    elif task == "manager" and out.get("winner") == "LONG":
        out["conviction"] = _r(max(0.0, out["conviction"] - 0.1 * falsified))
    return out


def tool_plan(task: str, ev: dict, offered: list[str]) -> list[dict]:
    if task == "planning":  # asked only under pass protocols 1 and 2: since 3 PLANNING offers no tools
        calls = [
            {"name": "get_portfolio", "args": {}},
            {"name": "get_market_snapshot", "args": {"symbols": ev["symbols"]}},
        ]
    elif task == "quant" and "technical" not in ev:
        # pass protocol 4: the evidence is the question alone; fetch the indicators the answer rests on, and the
        # last week's bars
        calls = [
            {"name": "get_indicators", "args": {"symbol": ev["symbol"], "names": list(QUANT_METRICS)}},
            {"name": "get_price_history", "args": {"symbol": ev["symbol"], "lookback": 5}},
        ]
    elif task == "quant":
        calls = [
            {
                "name": "get_indicators",
                "args": {"symbol": ev["symbol"], "names": ["rsi14", "macd_hist", "sma50", "sma200", "atr14"]},
            },
            {"name": "get_price_history", "args": {"symbol": ev["symbol"], "lookback": 10}},
        ]
    else:
        calls = []
    return [c for c in calls if c["name"] in offered]


def prose(task: str, ev: dict) -> str:
    return f"Offline model: no structured answer requested for task {task or 'unknown'}."
