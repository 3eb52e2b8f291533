"""Collection `approvals`: one decision per paused cycle, taken by compare-and-set.

The paused cycle lives in LangGraph's checkpoint, which two approvers can both read as pending. Before either
resumes it, each inserts the cycle's claim here (`_id` = cycle id): the unique `_id` lets exactly one insert
win on any server. The claim then records the decision (`deciding`, then `decided` with the cycle's status), so
a loser is told who decided and when. A claim whose owner is gone while `deciding` (database/claims.py: no
longer deciding in this process, its pid dead on this host, or older than LEASE_S from another host) can be
taken over, so a killed approver never blocks a cycle forever.

Taking over is not deciding anew once the dead approver's fill was started (its cycle has an execution-ledger
entry): that fill is finished, never reversed. Whoever recovers the cycle (a later approval, `store recover`)
`adopt`s the dead claim's decision, keeping who took it and when and noting who finished it; a later opposite
decision is refused (graph/machine/runner.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Optional

from pymongo import DESCENDING
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from database import claims

COLLECTION = "approvals"
LEASE_S = 15 * 60  # an approval from another host still deciding after this is taken as dead


class Decisions:
    def __init__(self, db: Database) -> None:
        self.col = db[COLLECTION]

    def claim(self, cycle_id: str, session_id: str, *, approved: bool, by: str) -> tuple[Optional[str], Optional[dict]]:
        """(token, None) when this caller now decides the cycle; (None, the claim that holds it) otherwise."""
        token = uuid.uuid4().hex
        mine = {
            "_id": cycle_id,
            "session_id": session_id,
            "approved": approved,
            "by": by,
            "at": time.time(),
            "state": "deciding",
            "owner": claims.owner(),
            "token": token,
        }
        claims.hold(token)
        won = False
        try:
            for _ in range(10):  # a claim released or taken over between our insert and our read: try again
                try:
                    self.col.insert_one(dict(mine))
                    won = True
                    return token, None
                except DuplicateKeyError:
                    held = self.col.find_one({"_id": cycle_id})
                if (
                    held is not None
                    and held.get("state") == "deciding"
                    and not claims.live(held, since=float(held.get("at") or 0), lease_s=LEASE_S)
                ):
                    # only while it is still `deciding`: a holder that settled after our read (settle() stores the
                    # decision before it lets go of the claim) keeps its decided record, which losers are shown
                    taken = self.col.find_one_and_replace(
                        {"_id": cycle_id, "token": held["token"], "state": "deciding"}, dict(mine)
                    )
                    won = taken is not None
                    if won:
                        return token, None
                elif held is not None:
                    return None, held
            raise RuntimeError(f"cycle {cycle_id}: its approval claim kept changing while claiming it")
        finally:
            if not won:
                claims.drop(token)

    def settle(self, cycle_id: str, token: str, status: str) -> None:
        """The decision is made: the claim stays, as the record losers are shown."""
        try:
            self.col.update_one(
                {"_id": cycle_id, "token": token},
                {"$set": {"state": "decided", "status": status, "decided_at": time.time()}},
            )
        finally:
            claims.drop(token)

    def release(self, cycle_id: str, token: str) -> None:
        """Nothing was decided (refused, or failed before resuming): the cycle is free to decide again."""
        claims.drop(token)  # first: if the store is gone, the claim left behind reads as abandoned
        self.col.delete_one({"_id": cycle_id, "token": token})

    def held(self, cycle_id: str) -> Optional[dict[str, Any]]:
        return self.col.find_one({"_id": cycle_id})

    def adopt(self, cycle_id: str, token: str, decided: dict[str, Any], finished_by: str) -> None:
        """The claim this caller took over carries on the decision `decided` (the dead approver's): its approval,
        who took it and when stay; `finished_by` says who finished it."""
        self.col.update_one(
            {"_id": cycle_id, "token": token},
            {
                "$set": {
                    "approved": bool(decided.get("approved")),
                    "by": decided.get("by"),
                    "at": decided.get("at"),
                    "finished_by": finished_by,
                }
            },
        )

    def abandoned(self) -> list[dict[str, Any]]:
        """Claims still `deciding` whose decider is gone (see the module doc), oldest first."""
        return [
            c
            for c in self.col.find({"state": "deciding"}).sort("at", 1)
            if not claims.live(c, since=float(c.get("at") or 0), lease_s=LEASE_S)
        ]

    def last(self, session_id: str) -> Optional[dict[str, Any]]:
        """The session's latest claim, decided or deciding."""
        return self.col.find_one({"session_id": session_id}, sort=[("at", DESCENDING)])


def describe(claim: dict[str, Any]) -> str:
    """`cycle s:c1 was approved by alice (via http) at 2026-…Z (it ended completed)`, or `… is being approved`."""
    verb = "approved" if claim.get("approved") else "rejected"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(claim.get("at") or 0)))
    if claim.get("state") == "decided":
        finished = f", finished by {claim['finished_by']}" if claim.get("finished_by") else ""
        return (
            f"cycle {claim['_id']} was {verb} by {claim.get('by')} at {at}{finished} (it ended {claim.get('status')})"
        )
    return f"cycle {claim['_id']} is being {verb} by {claim.get('by')} since {at}"
