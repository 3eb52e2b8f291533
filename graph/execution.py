"""The standalone execution backend: the paper broker, a ledger keyed by cycle id, a stored portfolio."""
from __future__ import annotations

from typing import Optional

from agent.broker import execute_decision
from agent.config import AgentConfig
from agent.markets import get_profile
from database.connection import Store
from schemas.decision import Decision, DecisionResult
from schemas.portfolio import PortfolioSnapshot


class PaperExecution:
    def __init__(self, store: Store, config: AgentConfig):
        self.store = store
        self.config = config
        self.profile = get_profile(config.market)

    def lookup(self, cycle_id: str) -> Optional[dict]:
        return self.store.executions.get(cycle_id)

    def execute(self, decision: Decision, *, cycle_id: str, session_id: str, universe: list[str],
                prices: dict[str, float], prev_closes: dict[str, float], portfolio: PortfolioSnapshot,
                as_of: str) -> tuple[DecisionResult, PortfolioSnapshot]:
        return execute_decision(decision, universe=universe, prices=prices, portfolio=portfolio, as_of=as_of,
                                profile=self.profile, fees_bps=self.config.fees_bps,
                                slippage_bps=self.config.slippage_bps, prev_closes=prev_closes)

    def record(self, cycle_id: str, session_id: str, result: dict) -> bool:
        """The ledger entry is written first and is unique per cycle: a second execution of the
        same cycle finds it and never moves the portfolio again."""
        if not self.store.executions.record(cycle_id, session_id, result):
            return False
        self.store.portfolios.save(session_id, PortfolioSnapshot.model_validate(result["portfolio_after"]), cycle_id)
        return True
