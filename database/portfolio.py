"""Per-session portfolio state (versioned, compare-and-set) and the once-per-cycle execution ledger.

A fill is committed in two writes joined by an outbox: the ledger entry is inserted `pending`
(unique per cycle, carrying the portfolio it produces and the version it was computed from), then
the portfolio moves from that version to the next only if it is still at it (compare-and-set), then
the entry is marked `committed`. A crash between the two leaves a pending entry that
`complete_pending` finishes on the next start: applied if the portfolio has not moved, `aborted`
(nothing filled) if another cycle moved it first. So no fill without its record and no lost update.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from pymongo import ASCENDING, IndexModel
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from schemas.portfolio import PortfolioSnapshot

# how many of the latest committing cycle ids a portfolio remembers (to tell "my commit landed" apart)
HISTORY = 50


class PortfolioConflict(RuntimeError):
    """The session's portfolio moved on after this cycle read it: nothing filled."""

    @classmethod
    def moved_on(cls, session_id: str, cycle_id: str, read: Any, now: Any, by: Any = None) -> PortfolioConflict:
        return cls(
            f"portfolio of session '{session_id}' moved on since cycle {cycle_id} read it (version {read}, "
            f"now {now}{f', last changed by {by}' if by else ''}): nothing filled; run a new cycle on the "
            f"current portfolio"
        )


class PortfolioStore:
    """Collection 'portfolios': one doc per session {session_id, snapshot, version, cycle_id, history, updated_ts}."""

    def __init__(self, db: Database) -> None:
        self.col = db["portfolios"]

    def ensure_indexes(self) -> None:
        self.col.create_index([("session_id", ASCENDING)], unique=True, name="session_id")

    def load(self, session_id: str) -> PortfolioSnapshot | None:
        return self.load_versioned(session_id)[0]

    def load_versioned(self, session_id: str) -> tuple[Optional[PortfolioSnapshot], int]:
        """(snapshot, version); version 0 means the session has no stored portfolio yet."""
        doc = self.col.find_one({"session_id": session_id}, {"_id": 0, "snapshot": 1, "version": 1})
        if doc is None:
            return None, 0
        return PortfolioSnapshot.model_validate(doc["snapshot"]), int(doc.get("version") or 1)

    def state(self, session_id: str) -> dict[str, Any]:
        doc = self.col.find_one({"session_id": session_id}, {"_id": 0, "version": 1, "cycle_id": 1, "history": 1})
        return doc or {"version": 0, "cycle_id": None, "history": []}

    def save(self, session_id: str, snapshot: PortfolioSnapshot, cycle_id: str) -> int:
        """Unconditional write (a backtest's simulation owns its portfolio); returns the new version."""
        doc = self.col.find_one_and_update(
            {"session_id": session_id},
            {
                "$set": {"snapshot": snapshot.model_dump(mode="json"), "cycle_id": cycle_id, "updated_ts": time.time()},
                "$inc": {"version": 1},
            },
            upsert=True,
            projection={"_id": 0, "version": 1},
            return_document=True,
        )
        assert doc is not None  # an upsert returning the document after it always finds one
        return int(doc["version"])

    def commit(self, session_id: str, snapshot: PortfolioSnapshot, cycle_id: str, expected_version: int) -> bool:
        """Compare-and-set: move the portfolio from `expected_version` to the next; False if it is not there."""
        fields = {
            "snapshot": snapshot.model_dump(mode="json"),
            "cycle_id": cycle_id,
            "updated_ts": time.time(),
            "version": expected_version + 1,
        }
        if expected_version == 0:
            try:
                self.col.insert_one({"session_id": session_id, **fields, "history": [cycle_id]})
            except DuplicateKeyError:
                return False
            return True
        res = self.col.update_one(
            {"session_id": session_id, "version": expected_version},
            {"$set": fields, "$push": {"history": {"$each": [cycle_id], "$slice": -HISTORY}}},
        )
        return res.modified_count == 1


class ExecutionLedger:
    """Collection 'executions', unique on cycle_id: a cycle's orders are filled at most once."""

    def __init__(self, db: Database) -> None:
        self.col = db["executions"]

    def ensure_indexes(self) -> None:
        self.col.create_indexes(
            [
                IndexModel([("cycle_id", ASCENDING)], unique=True, name="cycle_id"),
                IndexModel([("session_id", ASCENDING)], name="session_id"),
                IndexModel([("state", ASCENDING)], name="state"),
            ]
        )

    def get(self, cycle_id: str) -> dict[str, Any] | None:
        """The result dict recorded for cycle_id (as passed to record), or None; an aborted entry
        (its commit lost the race) filled nothing and reads as None."""
        doc = self.col.find_one({"cycle_id": cycle_id}, {"_id": 0, "result": 1, "state": 1})
        if doc is None or doc.get("state") == "aborted":
            return None
        return doc["result"]

    def entry(self, cycle_id: str) -> dict[str, Any] | None:
        return self.col.find_one({"cycle_id": cycle_id}, {"_id": 0})

    def record(
        self,
        cycle_id: str,
        session_id: str,
        result: dict[str, Any],
        *,
        state: str = "committed",
        base_version: Optional[int] = None,
    ) -> bool:
        """True if newly recorded; False if cycle_id was already recorded (the first result stays)."""
        try:
            self.col.insert_one(
                {
                    "cycle_id": cycle_id,
                    "session_id": session_id,
                    "result": result,
                    "state": state,
                    "base_version": base_version,
                    "recorded_ts": time.time(),
                }
            )
        except DuplicateKeyError:
            return False
        return True

    def mark(self, cycle_id: str, state: str) -> None:
        self.col.update_one({"cycle_id": cycle_id, "state": "pending"}, {"$set": {"state": state}})

    def committed(self, session_id: str) -> list[dict[str, Any]]:
        """A session's committed entries in the order they filled (a cycle's exits before its decision's fills)."""
        return list(
            self.col.find({"session_id": session_id, "state": "committed"}, {"_id": 0}).sort(
                [("recorded_ts", ASCENDING), ("cycle_id", ASCENDING)]
            )
        )

    def pending(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"state": "pending"}
        if session_id is not None:
            query["session_id"] = session_id
        return list(self.col.find(query, {"_id": 0}).sort("recorded_ts", ASCENDING))


def commit_fill(
    portfolios: PortfolioStore,
    ledger: ExecutionLedger,
    cycle_id: str,
    session_id: str,
    result: dict[str, Any],
    base_version: int,
) -> bool:
    """The outbox write of one fill: False if the cycle was already recorded; PortfolioConflict if the
    portfolio moved on since `base_version` (the entry is then `aborted`: nothing filled)."""
    if not ledger.record(cycle_id, session_id, result, state="pending", base_version=base_version):
        return False
    _finish(portfolios, ledger, cycle_id, session_id, result, base_version)
    return True


def _finish(
    portfolios: PortfolioStore,
    ledger: ExecutionLedger,
    cycle_id: str,
    session_id: str,
    result: dict[str, Any],
    base_version: int,
) -> str:
    after = PortfolioSnapshot.model_validate(result["portfolio_after"])
    if portfolios.commit(session_id, after, cycle_id, base_version) or cycle_id in (
        portfolios.state(session_id).get("history") or []
    ):
        ledger.mark(cycle_id, "committed")
        return "committed"
    ledger.mark(cycle_id, "aborted")
    now = portfolios.state(session_id)
    raise PortfolioConflict.moved_on(session_id, cycle_id, base_version, now.get("version"), now.get("cycle_id"))


def complete_pending(
    portfolios: PortfolioStore, ledger: ExecutionLedger, session_id: Optional[str] = None
) -> dict[str, int]:
    """Finish fills a crash left half way: {'committed': n, 'aborted': m}."""
    counts = {"committed": 0, "aborted": 0}
    for entry in ledger.pending(session_id):
        try:
            _finish(
                portfolios,
                ledger,
                entry["cycle_id"],
                entry["session_id"],
                entry["result"],
                int(entry.get("base_version") or 0),
            )
            counts["committed"] += 1
        except PortfolioConflict:
            counts["aborted"] += 1
    return counts
