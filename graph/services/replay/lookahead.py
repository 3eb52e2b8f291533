"""The look-ahead audit: every piece of evidence a recorded cycle saw that was not yet known at its decision time.

It reads the recording only (the store's events), never today's data: each cycle's manifest says when it decided
(its as-of date, its market and whether it decided at the open or the close); its evidence is what the audit log
holds of what the agents saw — SCANNING's bundles, every tool result, every memory recall and a backtest's Case.
Any bar, news item, filing or memory in them dated at or after the decision time is listed. The walk is by shape,
not by contract name, so evidence added to a contract later is audited without a change here:
- a bar (a mapping with date/timestamp and open, high, low, close) is known once complete, at its session's close;
- a news item (`published_at`), a filing (`reported_at`) and a memory (`known_at`) are known from that instant, a
  date alone counting as after that day's close (agent.markets.published_time, the rule the data sources obey);
- the book the cycle started from (the manifest's inputs.portfolio): its as-of and each position's opening, checked
  and dividend dates (graph/machine/timeline.py book_dates) must not be after the cycle's as-of date.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import pandas as pd

from agent.markets import decision_time, get_profile, published_time, session_close
from graph.machine.timeline import book_dates
from schemas.events import AnyEvent, parse_all

KINDS = ("bar", "news", "filing", "memory", "book")
_BAR_KEYS = frozenset({"open", "high", "low", "close"})


@dataclass(frozen=True)
class Leak:
    cycle_id: str
    kind: str  # bar | news | filing | memory
    symbol: Optional[str]
    dated: str  # the item's own date or stamp, as recorded
    known_at: str  # when it became known (UTC)
    decision_time: str  # when the cycle decided (UTC)
    where: str  # which recorded event holds it

    def line(self) -> str:
        return (
            f"{self.cycle_id}: {self.kind} {self.symbol or ''} dated {self.dated} (known {self.known_at} UTC) "
            f"reached a decision taken at {self.decision_time} UTC, in {self.where}"
        ).replace("  ", " ")


@dataclass
class CycleAudit:
    cycle_id: str
    as_of: Optional[str]
    decision_time: Optional[str]
    decide_at: str
    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    leaks: list[Leak] = field(default_factory=list)
    note: Optional[str] = None


@dataclass
class LookaheadReport:
    sessions: list[str]
    cycles: list[CycleAudit]
    # sessions whose hash chain (database/events.py verify_chain) is broken: {session_id, seq, reason}. The audit
    # reads what the log holds now; a log edited after the fact (a date moved back in place, an event deleted)
    # is no evidence of what the agents saw, so a broken one is never reported clean
    broken: list[dict[str, Any]] = field(default_factory=list)

    @property
    def leaks(self) -> list[Leak]:
        return [leak for c in self.cycles for leak in c.leaks]

    def checked(self) -> dict[str, int]:
        return {k: sum(c.checked[k] for c in self.cycles) for k in KINDS}

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "cycles": len(self.cycles),
            "checked": self.checked(),
            "leaks": [leak.__dict__ for leak in self.leaks],
            "unaudited": [{"cycle_id": c.cycle_id, "note": c.note} for c in self.cycles if c.note],
            "broken": list(self.broken),
        }


def audit_events(events: Iterable[dict[str, Any]]) -> list[CycleAudit]:
    """One audit per cycle of a session's events (in seq order)."""
    by_cycle: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cycle_id"):
            by_cycle.setdefault(e["cycle_id"], []).append(e)
    return [audit_cycle(cycle_id, evs) for cycle_id, evs in by_cycle.items()]


def audit_cycle(cycle_id: str, events: list[dict[str, Any]]) -> CycleAudit:
    """The cycle's events are read as the audit log's typed events (schemas/events.py): one this code cannot read
    leaves the cycle unaudited, named, so an unreadable recording never passes as clean."""
    typed, unreadable = parse_all(events)
    manifest = next((t.payload for t in typed if t.kind == "manifest"), None)
    config = manifest.config if manifest is not None else {}
    inputs = (manifest.inputs if manifest is not None else None) or {}
    as_of = inputs.get("as_of") or _scan_as_of(typed)
    decide_at = config.get("decide_at") or "close"
    audit = CycleAudit(cycle_id, as_of, None, decide_at)
    if as_of is None:
        audit.note = "no manifest and no SCANNING contract: nothing says when this cycle decided"
        return audit
    if manifest is None:
        audit.note = "no manifest recorded: its decision time is taken as the close of its as-of date"
    if unreadable:
        audit.note = f"{len(unreadable)} event(s) cannot be read, their evidence unaudited; first: {unreadable[0]}"
    profile = get_profile(config.get("market"), decide_at)
    decided = decision_time(profile, as_of)
    audit.decision_time = _iso(decided)
    for dated, symbol, what in book_dates(inputs.get("portfolio")):
        # the book the cycle started from: a date after its own means the session went back in time
        audit.checked["book"] += 1
        if dated[:10] > str(as_of)[:10]:
            audit.leaks.append(
                Leak(cycle_id, "book", symbol, dated, dated, audit.decision_time, f"manifest inputs.portfolio ({what})")
            )
    for where, symbol, node in _evidence(typed, inputs):
        for kind, sym, dated in _dated(node, symbol):
            audit.checked[kind] += 1
            known = session_close(profile, dated) if kind == "bar" else published_time(dated, profile)
            # a bar is complete at its close: known at the decision when its close is not after it; anything
            # published is known only strictly before the decision (agent.markets.visible)
            late = known > decided if kind == "bar" else known >= decided
            if late:
                audit.leaks.append(Leak(cycle_id, kind, sym, str(dated), _iso(known), audit.decision_time, where))
    return audit


def _scan_as_of(events: list[AnyEvent]) -> Optional[str]:
    for e in events:
        if e.kind == "contract" and e.state == "SCANNING":
            return e.payload.data.get("as_of")
    return None


def _evidence(events: list[AnyEvent], inputs: dict[str, Any]) -> Iterator[tuple[str, Optional[str], Any]]:
    """(where, symbol if known, JSON) of everything the agents were shown or could ask for."""
    if inputs.get("case"):
        yield "manifest inputs.case (the backtest's Case)", None, inputs["case"]
    for e in events:
        where = f"seq {e.seq} {e.state} {e.kind}"
        if e.kind == "contract" and e.state == "SCANNING":
            for snap in e.payload.data.get("snapshots") or []:
                yield where, snap.get("symbol"), snap.get("bundle")
        elif e.kind == "tool_result":
            yield f"{where} {e.payload.name}".rstrip(), None, e.payload.result
        elif e.kind == "retrieval":
            yield where, e.payload.symbol, e.payload.hits


def _dated(node: Any, symbol: Optional[str]) -> Iterator[tuple[str, Optional[str], str]]:
    """Every dated piece of evidence inside a JSON value: (kind, symbol, its date or stamp)."""
    if isinstance(node, list):
        for item in node:
            yield from _dated(item, symbol)
        return
    if not isinstance(node, dict):
        return
    symbol = node.get("symbol") or node.get("ticker") or symbol
    stamp = node.get("date") or node.get("timestamp")
    if stamp and _BAR_KEYS <= node.keys():
        yield "bar", symbol, str(stamp)
    elif node.get("published_at"):
        yield "news", symbol, str(node["published_at"])
    elif node.get("reported_at"):
        yield "filing", symbol, str(node["reported_at"])
    elif node.get("known_at"):
        yield "memory", symbol, str(node["known_at"])
    for value in node.values():
        if isinstance(value, (dict, list)):
            yield from _dated(value, symbol)


def _iso(ts: pd.Timestamp) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S")


def audit_sessions(store, session_ids: list[str]) -> LookaheadReport:
    """Each session's hash chain first (its head, counter and ledger included), then its cycles' evidence."""
    cycles: list[CycleAudit] = []
    broken: list[dict[str, Any]] = []
    for sid in session_ids:
        chain = store.events.verify_chain(sid)
        if not chain["ok"]:
            first = chain["first_broken"]
            broken.append({"session_id": sid, "seq": first["seq"], "reason": first["reason"]})
        cycles += audit_events(store.events.read(sid))
    return LookaheadReport(list(session_ids), cycles, broken)
