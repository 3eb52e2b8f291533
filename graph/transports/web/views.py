"""What each page shows, read through the kernel's capabilities (so the HTTP transport's policies apply as to the
API) and the replay reconstruction (graph/machine/recording.py build_session_log): plain dicts for the templates."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Optional

from agent.pricing import Spend, cost_of, price_of
from graph.kernel.core import Kernel
from graph.kernel.errors import BadInput, KernelError, NotFound
from graph.machine.recording import Cycle, build_session_log
from graph.services.run_files import read_run_text
from graph.transports.web.charts import Series, equity_and_drawdown
from schemas.states import STATES

TRANSPORT = "http"  # the console is the HTTP server: the same policies as its API
PAGE_SIZE = 50
LIST_MAX = 1000  # list_sessions' most (graph/kernel/models.py ListSessionsInput.limit)
# read_events' most per call (graph/kernel/models.py EventsQuery.limit)
EVENTS_PAGE = 100_000
# the feature bundle's numbers the approval screen shows (the rest are on the log page, in the SCANNING contract)
BUNDLE_NUMBERS = (
    "close",
    "prev_close",
    "gap_pct",
    "rsi14",
    "macd_hist",
    "sma20",
    "sma50",
    "sma200",
    "atr14",
    "support",
    "resistance",
    "dist_to_support_pct",
    "dist_to_resistance_pct",
    "volume_vs_avg20",
)
ABSTAINED = "deterministic-abstain"


def call(kernel: Kernel, name: str, **args: Any):
    return kernel.call(name, {k: v for k, v in args.items() if v is not None}, transport=TRANSPORT)


# ------------------------------------------------------------------------------------------------ sessions
def sessions_page(kernel: Kernel, kind: Optional[str], status: Optional[str], page: int) -> dict[str, Any]:
    """One page of the newest sessions (of a kind and last status when asked), and the ones waiting for a decision
    first on every page: two reads of the summaries, each only as long as the page needs (the list's most is
    1,000: the 20th page of 50)."""
    pages = LIST_MAX // PAGE_SIZE
    page = min(max(1, page), pages)
    want = min(LIST_MAX, page * PAGE_SIZE + 1)  # one more than the page: is there an older one?
    out = call(kernel, "list_sessions", limit=want, kind=kind or None, status=status or None)
    rows = [s.model_dump() for s in out.sessions]
    pending = [
        s.model_dump()
        for s in call(kernel, "list_sessions", limit=PAGE_SIZE, all=True, status="pending_approval").sessions
    ]
    return {
        "pending": pending,
        "sessions": rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE],
        "page": page,
        "older": len(rows) > page * PAGE_SIZE and page < pages,
        "kind": kind or "",
        "status": status or "",
        "unsummarised": out.unsummarised,
        "replays_hidden": out.replays_hidden and kind != "replay",
        "list_max": LIST_MAX,
    }


def cycle_pnl(cycle: dict[str, Any]) -> Optional[float]:
    """Realised P&L of the positions this cycle closed (its SCANNING exits, fees included); None when none closed."""
    exits = (contract(cycle, "SCANNING") or {}).get("exits") or []
    return round(sum(e.get("realized_pnl") or 0.0 for e in exits), 2) if exits else None


def contract(cycle: dict[str, Any] | Cycle, state: str) -> Optional[dict[str, Any]]:
    contracts = cycle.contracts if isinstance(cycle, Cycle) else cycle.get("contracts") or {}
    found = contracts.get(state)
    return found.get("data") if found else None


def session_page(kernel: Kernel, session_id: str) -> dict[str, Any]:
    replay = call(kernel, "replay", session_id=session_id)
    cycles = []
    for c in replay.cycles:
        executing = contract(c, "EXECUTING") or {}
        fills = ((executing.get("result") or {}).get("executed_trades")) or []
        cycles.append(
            {
                "index": c["index"],
                "cycle_id": c["cycle_id"],
                "status": c["status"],
                "symbols": (c.get("inputs") or {}).get("symbols") or [],
                "as_of": (c.get("inputs") or {}).get("as_of"),
                "fills": len(fills),
                "pnl": cycle_pnl(c),
                "approval": c.get("approval"),
                "events": c.get("events"),
                "tokens": c.get("tokens") or {},
            }
        )
    try:
        book = call(kernel, "portfolio", session_id=session_id).model_dump()
    except KernelError:  # a backtest keeps its book in its run folder; a session that never sized a book has none
        book = None
    return {"session_id": session_id, "replay": replay.model_dump(), "cycles": cycles, "book": book}


# ------------------------------------------------------------------------------------------------ one cycle
def cycle_id_of(session_id: str, index: int) -> str:
    return f"{session_id}:c{index}"


class CycleCache:
    """Cycles that have ended, as rebuilt, while their session's chain head stands where it stood: the log is
    append-only and the head moves with every batch stored (database/heads.py), so a cycle is read again as soon as
    anything is written to its session (a late event, a deletion) and a paused or running cycle is never kept. A
    person reloading the approval screen of a 20-symbol cycle then waits for the page, not for 1.5 MB of events."""

    def __init__(self, size: int = 64):
        self.size = size
        self.kept: OrderedDict[tuple[str, int], tuple[tuple[int, str], Cycle]] = OrderedDict()
        self.lock = threading.Lock()

    @staticmethod
    def head(kernel: Kernel, session_id: str) -> Optional[tuple[int, str]]:
        head = kernel.store.events.heads.get(session_id)
        return None if head is None else (head.seq, head.hash)

    def get(self, key: tuple[str, int], head: Optional[tuple[int, str]]) -> Optional[Cycle]:
        with self.lock:
            found = self.kept.get(key)
            if found is None or head is None or found[0] != head:
                return None
            self.kept.move_to_end(key)
            return found[1]

    def put(self, key: tuple[str, int], head: Optional[tuple[int, str]], cycle: Cycle) -> None:
        if head is None or cycle.cut_off or cycle.paused:
            return
        with self.lock:
            self.kept[key] = (head, cycle)
            self.kept.move_to_end(key)
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)


def load_cycle(kernel: Kernel, session_id: str, index: int, cache: Optional[CycleCache] = None) -> Cycle:
    """The cycle rebuilt from its own events alone (read_events filtered to it, then the replay reconstruction): a
    long backtest's page reads one cycle, not the session."""
    head = CycleCache.head(kernel, session_id) if cache is not None else None
    kept = cache.get((session_id, index), head) if cache is not None else None
    if kept is not None:
        return kept
    cycle = _rebuilt(kernel, session_id, index)
    if cache is not None:
        cache.put((session_id, index), head, cycle)
    return cycle


def _rebuilt(kernel: Kernel, session_id: str, index: int) -> Cycle:
    cycle_id = cycle_id_of(session_id, index)
    events: list[dict] = []
    while True:
        page = call(
            kernel, "read_events", session_id=session_id, cycle_id=cycle_id, offset=len(events), limit=EVENTS_PAGE
        )
        events += page.events
        if not page.events or len(events) >= page.total:
            break
    cycles = [c for c in build_session_log(session_id, events).cycles if c.cycle_id == cycle_id]
    if not cycles:
        raise NotFound(f"session '{session_id}' has no cycle {index}", field="cycle")
    cycles[0].index = index
    return cycles[0]


def _bundles(scan: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for snap in scan.get("snapshots") or []:
        bundle = snap.get("bundle") or {}
        tech = bundle.get("technical") or {}
        news = bundle.get("news") or {}
        out.append(
            {
                "symbol": snap["symbol"],
                "price": snap.get("price"),
                "fallback": bundle.get("fallback"),
                "numbers": [(k, tech.get(k)) for k in BUNDLE_NUMBERS if k in tech],
                "news": news.get("items") or [],
                "net_sentiment": news.get("net_sentiment"),
                "fundamentals": bundle.get("fundamentals") or {},
                "forecast": bundle.get("forecast"),
            }
        )
    return out


def _panels(analyzing: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "symbol": p["symbol"],
            "notes": [{**n, "abstained": n.get("model_used") == ABSTAINED} for n in p.get("notes") or []],
        }
        for p in analyzing.get("panels") or []
    ]


def _orders(deciding: dict[str, Any]) -> list[dict[str, Any]]:
    """Each thesis beside the order it implied (if any): direction, entry, stop, target, quantity."""
    orders = {o["symbol"]: o for o in deciding.get("orders") or []}
    rows = [{**t, "order": orders.pop(t["symbol"], None)} for t in deciding.get("theses") or []]
    # an order without a thesis of this cycle (a sell of a held position): still shown
    rows += [
        {"symbol": s, "direction": None, "entry": None, "stop": o.get("stop"), "target": o.get("target"), "order": o}
        for s, o in orders.items()
    ]
    return rows


def cycle_page(kernel: Kernel, session_id: str, index: int, cache: Optional[CycleCache] = None) -> dict[str, Any]:
    c = load_cycle(kernel, session_id, index, cache)
    scan, executing = contract(c, "SCANNING") or {}, contract(c, "EXECUTING")
    debate, validating = contract(c, "DEBATE") or {}, contract(c, "VALIDATING")
    return {
        "session_id": session_id,
        "index": index,
        "cycle": c,
        "status": c.status,
        "paused": c.paused,
        "inputs": c.inputs or {},
        "approval": c.approval,
        "bundles": _bundles(scan),
        "exits": scan.get("exits") or [],
        "panels": _panels(contract(c, "ANALYZING") or {}),
        "debate": debate.get("results") or [],
        "orders": _orders(contract(c, "DECIDING") or {}),
        "deciding_rationale": (contract(c, "DECIDING") or {}).get("rationale"),
        "validation": validating,
        "execution": executing,
        "errors": c.errors,
        "memorizing": contract(c, "MEMORIZING"),
        "spend": recorded_spend(c),
    }


def recorded_spend(cycle: Cycle) -> dict[str, Any]:
    """Tokens and dollars by state from each recorded response's usage and model (the CLI's replay does the same)."""
    spend = Spend()
    for x in cycle.llm_calls:
        if x.answered:
            spend.add(x.state, x.usage or {}, cost_of(x.usage or {}, price_of(x.model)[1]))
    return spend.as_dict()


# ------------------------------------------------------------------------------------------------ the log
def log_page(kernel: Kernel, session_id: str, index: int, cache: Optional[CycleCache] = None) -> dict[str, Any]:
    """The cycle's events in seq order, each LLM call beside its prompt, answer, tokens, latency and cost, and the
    session's hash chain as the replay capability checks it."""
    c = load_cycle(kernel, session_id, index)
    rows: list[dict[str, Any]] = []
    for x in c.llm_calls:
        price = price_of(x.model)[1]
        rows.append(
            {
                "seq": x.seq,
                "type": "llm",
                "state": x.state,
                "call": x,
                "cost": cost_of(x.usage or {}, price) if x.answered else None,
                "priced": price is not None,
            }
        )
    for t in c.tool_calls:
        rows.append({"seq": t.seq, "type": "tool", "state": t.state, "call": t})
    for tr in c.transitions:
        rows.append({"seq": tr["seq"], "type": "transition", "state": tr.get("to"), "call": tr})
    for v in c.validations:
        rows.append({"seq": v["seq"], "type": "validation", "state": v.get("state"), "call": v})
    for kind, happened in (
        ("approval_decided", c.approvals),
        ("dividend_paid", c.dividends),
        ("position_exited", c.exits),
        ("abstained", c.abstentions),
    ):
        rows += [{"seq": h["seq"], "type": kind, "state": h["state"], "call": h} for h in happened]
    for e in c.errors:
        rows.append({"seq": e.get("seq") or 0, "type": "error", "state": e.get("state"), "call": e})
    rows.sort(key=lambda r: r["seq"])
    replay = call(kernel, "replay", session_id=session_id)
    return {
        "session_id": session_id,
        "index": index,
        "cycle": c,
        "rows": rows,
        "chain": replay.chain,
        "gap_free": replay.gap_free,
        "warnings": replay.warnings,
        "spend": recorded_spend(c),
        "states": STATES,
    }


# ------------------------------------------------------------------------------------------------ runs
def runs_page(kernel: Kernel) -> dict[str, Any]:
    return {"tasks": [t.model_dump() for t in call(kernel, "list_tasks", limit=100).tasks]}


def _read_json(artifacts: dict[str, Any], name: str) -> Optional[Any]:
    a = artifacts.get(name)
    if a is None:
        return None
    try:  # opened as the API serves it: never through a link planted in the run folder
        return json.loads(read_run_text(a.path))
    except (OSError, ValueError):  # UnsafeRunPath is a ValueError: the charts are left out, the file list names it
        return None


def run_page(kernel: Kernel, task_id: str) -> dict[str, Any]:
    """A task's progress and, once it has them, its equity and drawdown (a backtest's result, a benchmark's
    scorecard beside the published rows) and its files."""
    task = call(kernel, "task_status", task_id=task_id)
    arts = call(kernel, "task_artifacts", task_id=task_id)
    found = {a.name: a for a in arts.artifacts}
    series: list[Series] = []
    result = _read_json(found, "result.json")
    if result:
        for name, key in (("tradegraph", "equity_curve"), ("buy & hold", "benchmark_curve")):
            curve = result.get(key) or []
            series.append(Series(name, [p["date"] for p in curve], [float(p["equity"]) for p in curve]))
    card = _read_json(found, "scorecard.json")
    if card:
        for row in card.get("rows") or []:
            nav = row.get("nav") or []
            if nav:
                series.append(Series(row["name"], [p["date"] for p in nav], [float(p["equity"]) for p in nav]))
    equity_svg, drawdown_svg = equity_and_drawdown(series) if series else ("", "")
    images = [a.name for a in arts.artifacts if a.media_type == "image/png"]
    return {
        "task": task.model_dump(),
        "artifacts": [a.model_dump() for a in arts.artifacts],
        "images": images,
        "metrics": (result or {}).get("metrics"),
        "scorecard": card,
        "equity_svg": equity_svg,
        "drawdown_svg": drawdown_svg,
    }


# ------------------------------------------------------------------------------------------------ broker
def broker_available() -> bool:
    """The broker capabilities are registered (graph/kernel/capabilities.py): the Broker page is shown."""
    return "broker_status" in Kernel.capabilities()


def broker_page(kernel: Kernel) -> dict[str, Any]:
    """The broker's account, positions, open orders and the halt, as broker_status reads them; with no broker
    configured, the kernel's line saying so (the page explains how to configure one)."""
    try:
        status = call(kernel, "broker_status").model_dump()
    except BadInput as e:  # no broker configured, or its settings are wrong: the page says which
        return {"broker": None, "unavailable": e.message}
    return {"broker": status, "unavailable": None}
