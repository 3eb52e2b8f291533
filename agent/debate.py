"""DEBATE: bull and bear build their cases, each rebuts the other once, the manager judges;
code calibrates the manager's conviction against the panel."""
from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from agent.audit_events import emit
from agent.calibration import ABSTAIN_MODEL, calibrate, takes_side
from agent.config import AgentConfig
from agent.memory.recall import past_notes
from agent.parallel import run_parallel
from agent.passes import ContractError, TickerGuardError, structured_pass
from agent.prompts import task_messages
from schemas.analysis import AnalystNote, SymbolPanel
from schemas.debate import DebateCase, DebateResult, ManagerVerdict
from schemas.market import MarketSnapshot


def _brief(n: AnalystNote) -> dict:
    return {"analyst": n.analyst, "stance": n.stance, "confidence": n.confidence, "summary": n.summary,
            "key_points": n.key_points[:2], "abstained": n.model_used == ABSTAIN_MODEL}


def run_debate(panel: SymbolPanel, snap: MarketSnapshot, model: BaseChatModel, settings: AgentConfig,
               config: RunnableConfig) -> DebateResult:
    sym = snap.symbol
    if not any(takes_side(n) for n in panel.notes):
        # nobody argues either way: a debate would only make a side up out of nothing
        emit("validation", {"schema": "DebateResult", "check": "no_side_taken", "ok": True, "symbol": sym}, config)
        return DebateResult(symbol=sym, winner="NONE", conviction=0.0, raw_conviction=0.0, opposition_share=0.0,
                            manager_rationale="Every analyst abstained or was neutral: no side to debate, hold "
                                              "(decided in code, no model call).")
    base = {"symbol": sym, "as_of": snap.as_of, "price": snap.price, "prev_close": snap.prev_close}
    key_points = [p for n in panel.notes for p in n.key_points[:2]]
    bulls = [_brief(n) for n in panel.notes if n.stance > 0]
    bears = [_brief(n) for n in panel.notes if n.stance < 0]

    recalled = {side: past_notes(config, side, snap) for side in ("bull", "bear")}

    def ask(task: str, evidence: dict) -> DebateCase:
        side = "bull" if task.startswith("bull") else "bear"

        def right_side(c: DebateCase) -> None:
            if c.side != side:
                raise ValueError(f"side must be {side!r}, got {c.side!r}")

        return structured_pass(model, task_messages(task, evidence, notes=recalled[side]), DebateCase, max_retries=settings.max_repair_retries,
                               config=config, method=settings.structured_method, expect_symbol=sym, check=right_side)

    def bear_points():
        return [p for n in bears for p in n["key_points"]]

    def bull_points():
        return [p for n in bulls for p in n["key_points"]]

    build = run_parallel({
        "bull": lambda: ask("bull_build", {**base, "notes": bulls, "key_points": key_points,
                                           "opposing_points": bear_points()}),
        "bear": lambda: ask("bear_build", {**base, "notes": bears, "key_points": key_points,
                                           "opposing_points": bull_points()}),
    }, parallel=settings.parallel_llm)
    bull, bear = build["bull"], build["bear"]

    fallbacks: list[str] = []

    def rebut(side: str, own: DebateCase, other: DebateCase) -> DebateCase:
        try:
            return ask(f"{side}_rebuttal", {**base, "own_case": own.model_dump(), "other_case": other.model_dump()})
        except TickerGuardError:
            raise  # a contract about another symbol fails the state at once, rebuttal or not (PLAN.md)
        except ContractError as e:
            # a failed rebuttal must not sink the debate: that side stands on its first case
            fallbacks.append(side)
            emit("error", {"type": "rebuttal_fallback", "symbol": sym, "side": side, "error": str(e)}, config)
            return own

    rebutted = run_parallel({"bull": lambda: rebut("bull", bull, bear), "bear": lambda: rebut("bear", bear, bull)},
                            parallel=settings.parallel_llm)

    verdict = structured_pass(
        model, task_messages("manager", {**base, "notes": [_brief(n) for n in panel.notes],
                                         "bull": rebutted["bull"].model_dump(), "bear": rebutted["bear"].model_dump()},
                             notes=past_notes(config, "manager", snap)),
        ManagerVerdict, max_retries=settings.max_repair_retries, config=config, method=settings.structured_method,
        expect_symbol=sym)
    conviction, share = calibrate(verdict.conviction, panel.notes, verdict.winner)
    return DebateResult(symbol=sym, winner=verdict.winner, conviction=conviction, raw_conviction=verdict.conviction,
                        opposition_share=round(share, 4), manager_rationale=verdict.manager_rationale,
                        key_disagreements=verdict.key_disagreements, falsifiers=verdict.falsifiers,
                        rebuttals=[rebutted["bull"], rebutted["bear"]], rebuttal_fallbacks=sorted(fallbacks))
