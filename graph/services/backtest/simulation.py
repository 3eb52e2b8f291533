"""The backtest's ExecutionBackend: EXECUTING's submit_decision lands here during an episode.

Execution is the paper broker's (agent.broker.execute_decision: all-or-nothing, sells first,
fees/slippage, market profile) with the episode's settings; the simulation, not the store,
owns the portfolio. Every submit_decision call of a cycle is kept so the loop can apply seed
004's extraction rules (none -> hold, several -> the last, rejected -> hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from agent.broker import execute_decision
from agent.markets import MarketProfile, get_profile
from schemas.decision import Decision, DecisionResult, ExecutedTrade
from schemas.memory import ClosedTrade
from schemas.portfolio import DividendCredit, PortfolioSnapshot


@dataclass
class SubmitCall:
    cycle_id: str
    decision: Decision
    result: DecisionResult
    portfolio_before: PortfolioSnapshot
    portfolio_after: PortfolioSnapshot


@dataclass
class SimulationExecution:
    profile: MarketProfile
    fees_bps: float = 0.0
    slippage_bps: float = 0.0
    portfolio: Optional[PortfolioSnapshot] = None
    calls: list[SubmitCall] = field(default_factory=list)
    ledger: dict[str, dict] = field(default_factory=dict)
    # per cycle: the positions SCANNING closed on their levels and their fills
    exits: dict[str, tuple[list[ClosedTrade], list[ExecutedTrade]]] = field(default_factory=dict)
    # per cycle: the cash dividends SCANNING credited
    dividends: dict[str, list[DividendCredit]] = field(default_factory=dict)

    @classmethod
    def for_market(
        cls,
        market: str,
        *,
        fees_bps: float,
        slippage_bps: float,
        portfolio: Optional[PortfolioSnapshot] = None,
        decide_at: str = "close",
    ) -> SimulationExecution:
        return cls(
            profile=get_profile(market, decide_at), fees_bps=fees_bps, slippage_bps=slippage_bps, portfolio=portfolio
        )

    # ------------------------------------------------------------- ExecutionBackend
    def lookup(self, cycle_id: str) -> Optional[dict]:
        return self.ledger.get(cycle_id)

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
        # the simulation's portfolio is authoritative; the scan's copy must agree with it
        before = self.portfolio if self.portfolio is not None else portfolio
        result, after = execute_decision(
            decision,
            universe=universe,
            prices=prices,
            portfolio=before,
            as_of=as_of,
            profile=self.profile,
            fees_bps=self.fees_bps,
            slippage_bps=self.slippage_bps,
            prev_closes=prev_closes,
        )
        self.calls.append(SubmitCall(cycle_id, decision, result, before, after))
        return result, after

    def version(self, session_id: str) -> Optional[int]:
        return None  # the simulation is the only writer of its portfolio: nothing to compare against

    def record(self, cycle_id: str, session_id: str, result: dict, *, base_version: Optional[int] = None) -> bool:
        if cycle_id in self.ledger:
            return False
        self.ledger[cycle_id] = result
        return True

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
        self.exits[cycle_id] = (list(closed), list(trades))
        self.dividends[cycle_id] = list(dividends)
        self.portfolio = portfolio_after
        return None

    # ------------------------------------------------------------- used by the loop
    def calls_for(self, cycle_id: str) -> list[SubmitCall]:
        return [c for c in self.calls if c.cycle_id == cycle_id]
