"""The standalone execution backend: the paper broker, a ledger keyed by cycle id, a versioned stored portfolio."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from agent.broker import execute_decision
from agent.config import AgentConfig
from agent.markets import get_profile
from database import running
from database.connection import Store
from database.portfolio import commit_fill, complete_pending
from schemas.decision import Decision, DecisionResult, ExecutedTrade
from schemas.memory import ClosedTrade
from schemas.portfolio import DividendCredit, PortfolioSnapshot


class PaperExecution:
    def __init__(self, store: Store, config: AgentConfig):
        self.store = store
        self.config = config
        # the time rule matters to the broker too: a position bought at the open is checked from that day's bar
        self.profile = get_profile(config.market, config.decide_at)

    def lookup(self, cycle_id: str) -> Optional[dict]:
        session_id = cycle_id.rsplit(":c", 1)[0]
        complete_pending(self.store.portfolios, self.store.executions, session_id)
        return self.store.executions.get(cycle_id)

    def version(self, session_id: str) -> Optional[int]:
        return self.store.portfolios.load_versioned(session_id)[1]

    def execute(
        self,
        decision: Decision,
        *,
        cycle_id: str,
        session_id: str,
        universe: list[str],
        prices: dict[str, float],
        prev_closes: dict[str, float],
        portfolio: PortfolioSnapshot,
        as_of: str,
    ) -> tuple[DecisionResult, PortfolioSnapshot]:
        return execute_decision(
            decision,
            universe=universe,
            prices=prices,
            portfolio=portfolio,
            as_of=as_of,
            profile=self.profile,
            fees_bps=self.config.fees_bps,
            slippage_bps=self.config.slippage_bps,
            prev_closes=prev_closes,
        )

    def record(self, cycle_id: str, session_id: str, result: dict, *, base_version: Optional[int] = None) -> bool:
        """One outbox commit (database/portfolio.py): the ledger entry is unique per cycle, and the portfolio
        moves only from the version this cycle read; a lost race raises PortfolioConflict, nothing filled."""
        if base_version is None:
            base_version = self.version(session_id) or 0
        return self._fenced(
            cycle_id,
            session_id,
            lambda: commit_fill(
                self.store.portfolios, self.store.executions, cycle_id, session_id, result, base_version
            ),
        )

    def _fenced(self, key: str, session_id: str, commit: Callable[[], bool]) -> bool:
        """A fill under the running cycle's lease (database/running.py): none once its session was deleted, and one
        that landed after the deletion fenced it is removed again (ledger entry and the book it created), so a
        deleted session's portfolio is never recreated."""
        lease = running.current()
        if lease is not None:
            lease.check()
        try:
            return commit()
        finally:  # a conflict raised by a fill into a book the deletion removed is the deletion's too
            if lease is not None and lease.fenced() is not None:
                self.store.executions.col.delete_many({"cycle_id": key, "session_id": session_id})
                self.store.portfolios.col.delete_many({"session_id": session_id, "cycle_id": key})
                lease.check()

    def settle_exits(
        self,
        cycle_id: str,
        session_id: str,
        *,
        closed: list[ClosedTrade],
        trades: list[ExecutedTrade],
        portfolio_after: PortfolioSnapshot,
        base_version: Optional[int],
        dividends: Sequence[DividendCredit] = (),
    ) -> Optional[int]:
        """The same outbox as a fill, under its own ledger key: at most once per cycle, against the version read.
        The dividends credited before the decision ride in the same entry (an ex-date is paid once: the book
        it commits marks each position as credited through the cycle's day)."""
        if base_version is None:
            base_version = self.version(session_id) or 0
        result = {
            "kind": "exits",
            "closed": [c.model_dump(mode="json") for c in closed],
            "trades": [t.model_dump(mode="json") for t in trades],
            "portfolio_after": portfolio_after.model_dump(mode="json"),
        }
        if dividends:
            result["dividends"] = [d.model_dump(mode="json") for d in dividends]
        if not self._fenced(
            exits_key(cycle_id),
            session_id,
            lambda: commit_fill(
                self.store.portfolios, self.store.executions, exits_key(cycle_id), session_id, result, base_version
            ),
        ):
            raise RuntimeError(f"cycle {cycle_id} already closed positions on their levels: not closing them twice")
        return base_version + 1


def exits_key(cycle_id: str) -> str:
    return f"{cycle_id}:exits"
