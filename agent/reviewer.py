"""The reviewer (seed 000, stage 12): a JSON pass per closed position that critiques the thesis against the
outcome. Grounding: the outcome, the realised P&L, the signal's evolution, the thesis-vs-outcome deltas and
the memory record are set by code from the numbers; only `critique` and `lessons` are the model's."""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from agent.call_context import CallContext
from agent.config import AgentConfig
from agent.exits import outcome_of
from agent.passes import structured_pass
from agent.prompts import task_messages
from schemas.memory import ClosedTrade, TradeReview


def _pct(level: float | None, entry: float) -> str:
    return "none" if level is None else f"{level} ({(level / entry - 1) * 100:+.2f}%)"


def thesis_vs_outcome(t: ClosedTrade) -> str:
    horizon = f"{t.horizon_sessions} sessions" if t.horizon_sessions else "none"
    return (
        f"planned: entry {t.entry_price}, target {_pct(t.target, t.entry_price)}, stop {_pct(t.stop, t.entry_price)}, "
        f"horizon {horizon}; realised: {t.reason} exit at {t.exit_price} ({t.return_pct:+.2f}%, "
        f"P&L {t.realized_pnl:+.2f}) after {t.sessions_held} session(s), {t.opened} to {t.closed}"
    )


def memory_record(t: ClosedTrade, outcome: str, signal: str, critique: str, lessons: list[str]) -> str:
    """The text the memory store indexes: what a similar setup will share (its regime words, the exit, the
    outcome) and what was learned."""
    setup = " ".join(t.setup) or "unknown_setup"
    learned = " ".join(f"Lesson: {x}" for x in lessons)
    return (
        f"{t.symbol} {t.direction} setup {setup}; {t.reason} exit after {t.sessions_held} sessions, "
        f"{t.return_pct:+.2f}%: {outcome}, thesis {signal.lower()}. {critique} {learned}"
    )[:2000]


def review_trade(
    trade: ClosedTrade, model, settings: AgentConfig, config: RunnableConfig, call: CallContext
) -> TradeReview:
    outcome, signal = outcome_of(trade)
    facts = {"outcome": outcome, "realized_pnl": trade.realized_pnl, "signal_evolution": signal}
    evidence = {
        "symbol": trade.symbol,
        "direction": trade.direction,
        "conviction": trade.conviction,
        "thesis": {
            "entry": trade.entry_price,
            "stop": trade.stop,
            "target": trade.target,
            "horizon_sessions": trade.horizon_sessions,
            "setup": trade.setup,
        },
        "result": {
            "reason": trade.reason,
            "exit_price": trade.exit_price,
            "opened": trade.opened,
            "closed": trade.closed,
            "sessions_held": trade.sessions_held,
            "return_pct": trade.return_pct,
            **facts,
        },
    }
    drafted = structured_pass(
        model,
        task_messages("reviewer", evidence, protocol=call.protocol.number),
        TradeReview,
        max_retries=settings.max_repair_retries,
        config=config,
        call=call,
        method=settings.structured_method,
        expect_symbol=trade.symbol,
    )
    # whatever the model wrote in the factual fields is replaced by the numbers
    return drafted.model_copy(
        update={
            **facts,
            "symbol": trade.symbol,
            "direction": trade.direction,
            "thesis_vs_outcome": thesis_vs_outcome(trade),
            "memory_record": memory_record(trade, outcome, signal, drafted.critique, drafted.lessons),
        }
    )
