"""Deleting sessions: one (`delete`) or every one last written before a time (`prune`), each recorded in the
admin log (database/admin_log.py) before anything is removed.

What a deleted session leaves, and why:
- removed: its events (and the payload packs no other session's events use), chain head, cycle counter and summary;
  its portfolio, execution ledger, approval decisions and approval checkpoints; its idempotency records (they hold
  its answers); its replay sessions (`replay-<id>-<n>`: they re-execute and copy it), each with a record of its
  own; and, unless kept, the memories its cycles wrote. A memory's provenance is the cycle that wrote it: left behind, a note would go on steering
  other sessions' cycles with nothing left to audit where it came from. Sessions that already recalled one keep
  what they recalled in their own log (their retrieval events), so their replays stay identical.
- left: the LLM response cache (shared by request, not by session), kernel task records and a backtest's run
  folder under experiments/ (files on this machine: delete them yourself), and the admin log's records.
- the embedded store's file does not shrink: SQLite reuses the freed pages for what is written next.

What is never removed without force: a session with a cycle in flight (its lease in `running_cycles`,
database/running.py) or a kernel task running on it (a backtest's `tasks` document, its owner alive) is refused
by `delete` (SessionActive) and kept by `prune`, as is a session written to in the last ACTIVE_S seconds (a
writer that took no lease). `prune` also keeps a session whose last cycle is paused waiting for a person
(`pending_approval`): nobody asked to delete it by name. A forced deletion fences the session's leases before it
removes anything, so a cycle still running removes what it writes after that and stops (database/running.py).

Order: the fence, the `started` record (with the chain head as it stood), then the events, then what hangs off them, the
summary, the head last, then the `done` record. A deletion cut short leaves `started` alone and a session
partly there: running it again finishes it (its `started` record is reused, the head it recorded kept).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from database import claims
from database.admin_log import AdminLog
from database.checkpoint import CHECKPOINT_DB_SUFFIX
from database.running import RunningCycles
from database.running import describe as describe_lease
from database.sessions import session_kind

CHUNK = 5000  # events removed per command: a long backtest's log is never one huge transaction
# a session whose chain head moved this recently may still be written to: deleting it under its writer would leave
# that writer's next events as a log with no beginning
ACTIVE_S = 60.0
CHECKPOINT_COLLECTIONS = ("checkpoints", "checkpoint_writes")
TASK_STALE_S = 60.0  # a kernel task whose heartbeat is older than this is not running (graph/kernel/tasks.py)
TASK_ACTIVE = ("queued", "running")


class UnknownSession(LookupError):
    """Nothing of the session is in the store; the message says so, with its deletion if it was deleted."""


class SessionActive(RuntimeError):
    """The session was written to moments ago: refused, so a running writer is never cut from under."""


@dataclass
class Deletion:
    session_id: str
    kind: str
    events: int
    cycles: int
    bytes: int
    first_ts: Optional[float]
    last_ts: Optional[float]
    head: Optional[dict[str, Any]]
    replay_of: Optional[str] = None
    admin_seq: Optional[int] = None  # the `started` record (None on a dry run)
    removed: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_duration(text: str) -> float:
    """'90s', '45m', '12h', '30d', '2w' -> seconds; anything else is a ValueError naming it."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text or "")
    if not m or int(m.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration: a positive whole number and a unit s, m, h, d or w (e.g. 30d, 12h)"
        )
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


class Retention:
    def __init__(self, store) -> None:
        self.store = store
        self.admin = AdminLog(store.db)
        self.running = RunningCycles(store.db)

    # ---- what would go
    def plan_delete(self, session_id: str) -> list[Deletion]:
        """The session and its replay sessions, as they stand; UnknownSession (with the deletion line when it
        was deleted) if nothing of it is stored."""
        if not self._anything_of(session_id):
            raise UnknownSession(self.admin.unknown_session(session_id))
        ids = [session_id] + self._replays_of(session_id)
        return [self._facts(s) for s in ids]

    def plan_prune(
        self, older_than_s: float, kind: Optional[str] = None, now: Optional[float] = None
    ) -> list[Deletion]:
        """Sessions last written more than older_than_s ago (by their summaries), oldest first, each followed by
        its replay sessions."""
        cutoff = (now if now is not None else time.time()) - older_than_s
        out: list[Deletion] = []
        picked: set[str] = set()
        for s in self.store.sessions.older_than(cutoff, kind):
            for sid in [s["session_id"]] + self._replays_of(s["session_id"]):
                if sid not in picked:
                    picked.add(sid)
                    out.append(self._facts(sid))
        return out

    def withhold(self, plan: list[Deletion]) -> tuple[list[Deletion], list[tuple[str, str]]]:
        """A prune's plan without the sessions it must keep unless forced: each in flight (`in_flight`) or paused
        waiting for approval. (kept plan, [(session id, why)])."""
        kept: list[Deletion] = []
        withheld: list[tuple[str, str]] = []
        for d in plan:
            why = self.in_flight(d.session_id) or self._paused(d.session_id)
            if why is None:
                kept.append(d)
            else:
                withheld.append((d.session_id, why))
        return kept, withheld

    def in_flight(self, session_id: str) -> Optional[str]:
        """Why the session is being written right now (a cycle's live lease, a kernel task running on it), or None."""
        live = self.running.live(session_id)
        if live:
            return f"has {describe_lease(live[0])}"
        task = self._running_task(session_id)
        if task is not None:
            return f"has kernel task {task['_id']} ({task.get('kind')}) {task.get('status')} on it"
        return None

    def _running_task(self, session_id: str) -> Optional[dict[str, Any]]:
        if not session_id.startswith("bt-"):  # tasks name their session by run id: a backtest's is bt-<run id>
            return None
        for doc in self.store.db["tasks"].find({"run_id": session_id[3:], "status": {"$in": list(TASK_ACTIVE)}}):
            from database.embedded import pid_alive

            owner = doc.get("owner") or {}
            beat = float(doc.get("heartbeat_at") or doc.get("created_at") or 0)
            dead_here = (
                owner.get("host") == claims.HOST
                and owner.get("pid") != os.getpid()
                and not pid_alive(int(owner.get("pid") or 0))
            )
            if time.time() - beat < TASK_STALE_S and not dead_here:  # the rule graph/kernel/tasks.py reads
                return doc
        return None

    def _paused(self, session_id: str) -> Optional[str]:
        summary = self.store.sessions.get(session_id) or {}
        if summary.get("status") == "pending_approval":
            return (
                f"has cycle {summary.get('last_cycle_id')} paused waiting for approval (`tradegraph approve "
                f"{session_id}` or `--reject` decides it)"
            )
        return None

    # ---- removing
    def delete(
        self,
        plan: list[Deletion],
        *,
        by: str,
        reason: str,
        keep_memories: bool = False,
        force: bool = False,
        now: Optional[float] = None,
    ) -> list[Deletion]:
        """Delete each planned session (a replay after the session it replays, as planned); unless forced, refuses
        up front (SessionActive) when any of them was written to in the last ACTIVE_S seconds."""
        now = now if now is not None else time.time()
        for d in plan:
            running = None if force else self.in_flight(d.session_id)
            if running is not None:
                raise SessionActive(
                    f"session '{d.session_id}' {running}: stop it first, or delete with force (which "
                    f"fences it: what it writes after the deletion is removed and it stops)"
                )
            head = self.store.events.heads.get(d.session_id)
            if not force and head is not None and _age_s(head.updated, now) < ACTIVE_S:
                raise SessionActive(
                    f"session '{d.session_id}' was written to {_age_s(head.updated, now):.0f} s "
                    f"ago: it may still be running; stop it first (or wait {ACTIVE_S:.0f} s), or "
                    f"delete with force"
                )
        return [self._delete_one(d, by=by, reason=reason, keep_memories=keep_memories) for d in plan]

    def _delete_one(self, d: Deletion, *, by: str, reason: str, keep_memories: bool) -> Deletion:
        s, sid = self.store, d.session_id
        # first: a cycle still running (forced) removes what it writes from now on, and stops
        self.running.fence([sid], {"by": by, "at": time.time(), "admin_seq": None})
        unfinished = self._unfinished(sid)
        if unfinished is not None:  # a deletion cut short: its record (and the head it saw) stand
            started = unfinished
        else:
            started = self.admin.append(
                {
                    "action": "delete_session",
                    "phase": "started",
                    "session_id": sid,
                    "by": by,
                    "reason": reason,
                    "kind": d.kind,
                    "events": d.events,
                    "cycles": d.cycles,
                    "bytes": d.bytes,
                    "first_ts": d.first_ts,
                    "last_ts": d.last_ts,
                    "head": d.head,
                    "replay_of": d.replay_of,
                    "keep_memories": keep_memories,
                }
            )
            self.running.fence([sid], {"by": by, "at": started["ts"], "admin_seq": started["seq"]})
        cycles = s.events.cycle_ids(sid)
        removed = {"state_events": self._delete_events(sid)}
        removed["state_blobs"] = s.events.release_packs(sid)  # its payload packs no other session's events use
        db = s.db
        if cycles:
            removed["checkpoints"] = self._delete_checkpoints(cycles)
        removed["approvals"] = db["approvals"].delete_many({"session_id": sid}).deleted_count
        removed["executions"] = s.executions.col.delete_many({"session_id": sid}).deleted_count
        removed["portfolios"] = s.portfolios.col.delete_many({"session_id": sid}).deleted_count
        removed["idempotency_keys"] = db["idempotency_keys"].delete_many({"session_id": sid}).deleted_count
        if not keep_memories:
            removed["memories"] = s.memories.col.delete_many({"session_id": sid}).deleted_count
        removed["counters"] = s.events.counters.delete_many({"_id": f"{sid}#cycles"}).deleted_count
        removed["sessions"] = s.sessions.remove(sid)
        removed["chain_heads"] = s.events.heads.col.delete_many({"_id": sid}).deleted_count
        self.admin.append(
            {
                "action": "delete_session",
                "phase": "done",
                "session_id": sid,
                "by": by,
                "started_seq": started["seq"],
                "removed": removed,
            }
        )
        d.admin_seq, d.removed = int(started["seq"]), removed
        return d

    def _delete_events(self, sid: str) -> int:
        """By `_id`, found a seq range at a time through the (session_id, seq) index: nx-27017 plans a delete by
        any other filter as a scan of the whole log (6 s for 3,110 events among 1,000,000; 0.5 s this way)."""
        col, n = self.store.events.col, 0
        top = self.store.events.count(sid)
        for lo in range(1, top + 1, CHUNK):
            n += self._delete_ids(col, {"session_id": sid, "seq": {"$gte": lo, "$lt": lo + CHUNK}})
        return n + self._delete_ids(col, {"session_id": sid})  # anything outside the seqs (a broken log)

    @staticmethod
    def _delete_ids(col, query: dict[str, Any]) -> int:
        ids = [d["_id"] for d in col.find(query, {"_id": 1})]
        return sum(
            col.delete_many({"_id": {"$in": ids[i : i + CHUNK]}}).deleted_count for i in range(0, len(ids), CHUNK)
        )

    def _delete_checkpoints(self, cycle_ids: list[str]) -> int:
        client, name = self.store.client, self.store.db.name + CHECKPOINT_DB_SUFFIX
        if name not in client.list_database_names():
            return 0
        db = client[name]
        return sum(db[c].delete_many({"thread_id": {"$in": cycle_ids}}).deleted_count for c in CHECKPOINT_COLLECTIONS)

    def _unfinished(self, sid: str) -> Optional[dict[str, Any]]:
        recs = [r for r in self.admin.records(sid) if r.get("action") == "delete_session"]
        done = {r.get("started_seq") for r in recs if r.get("phase") == "done"}
        open_ = [r for r in recs if r.get("phase") == "started" and r["seq"] not in done]
        return open_[-1] if open_ else None

    # ---- facts
    def _anything_of(self, sid: str) -> bool:
        s = self.store
        return (
            s.events.exists(sid)
            or s.events.heads.get(sid) is not None
            or s.sessions.get(sid) is not None
            or s.portfolios.col.find_one({"session_id": sid}, {"_id": 1}) is not None
        )

    def _replays_of(self, sid: str) -> list[str]:
        """Its replay sessions, by summary and by chain head (a replay whose summary is missing still goes)."""
        found = {r["session_id"] for r in self.store.sessions.replays_of(sid)}
        pattern = f"^replay-{re.escape(sid)}-[0-9]+$"
        found |= {h["_id"] for h in self.store.events.heads.col.find({"_id": {"$regex": pattern}}, {"_id": 1})}
        return sorted(found, key=lambda x: (len(x), x))

    def _facts(self, sid: str) -> Deletion:
        s = self.store
        summary = s.sessions.get(sid) or {}
        head = s.events.heads.get(sid)
        counted = len(s.events.cycle_ids(sid))
        return Deletion(
            session_id=sid,
            kind=summary.get("kind") or session_kind(sid),
            events=s.events.count(sid),
            cycles=int(summary.get("cycles") or counted),
            bytes=int(summary.get("bytes") or 0),
            first_ts=summary.get("first_ts"),
            last_ts=summary.get("last_ts"),
            head=head.public() if head is not None else None,
            replay_of=summary.get("replay_of"),
        )


def _age_s(updated_iso: str, now: float) -> float:
    from datetime import datetime

    try:
        return now - datetime.fromisoformat(updated_iso).timestamp()
    except ValueError:
        return float("inf")


__all__ = ["Retention", "Deletion", "UnknownSession", "SessionActive", "parse_duration"]
