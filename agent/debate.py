"""DEBATE: bull and bear build their cases, each rebuts the other once, the manager judges;
code calibrates the manager's conviction against the panel."""

from __future__ import annotations

from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from agent.audit_events import emit
from agent.calibration import ABSTAIN_MODEL, calibrate, takes_side
from agent.call_context import CallContext
from agent.config import AgentConfig
from agent.memory.recall import past_notes
from agent.parallel import run_parallel
from agent.passes import ContractError, TickerGuardError, structured_pass
from agent.prompts import task_messages
from agent.protocols import version
from schemas.analysis import AnalystNote, SymbolPanel
from schemas.debate import DebateCase, DebateResult, ManagerVerdict
from schemas.market import MarketSnapshot


def _brief(n: AnalystNote, points: bool = True) -> dict:
    brief = {
        "analyst": n.analyst,
        "stance": n.stance,
        "confidence": n.confidence,
        "summary": n.summary,
        "key_points": n.key_points[:2],
        "abstained": n.model_used == ABSTAIN_MODEL,
    }
    if not points:
        del brief["key_points"]
    return brief


def run_debate(
    panel: SymbolPanel,
    snap: MarketSnapshot,
    model: BaseChatModel,
    settings: AgentConfig,
    config: RunnableConfig,
    call: CallContext,
) -> DebateResult:
    sym = snap.symbol
    if not any(takes_side(n) for n in panel.notes):
        # nobody argues either way: a debate would only make a side up out of nothing
        emit("validation", {"schema": "DebateResult", "check": "no_side_taken", "ok": True, "symbol": sym}, config)
        return DebateResult(
            symbol=sym,
            winner="NONE",
            conviction=0.0,
            raw_conviction=0.0,
            opposition_share=0.0,
            manager_rationale="Every analyst abstained or was neutral: no side to debate, hold "
            "(decided in code, no model call).",
        )
    base = {"symbol": sym, "as_of": snap.as_of, "price": snap.price, "prev_close": snap.prev_close}
    key_points = [p for n in panel.notes for p in n.key_points[:2]]
    bulls = [_brief(n) for n in panel.notes if n.stance > 0]
    bears = [_brief(n) for n in panel.notes if n.stance < 0]

    recalled = {side: past_notes(call.recall, config, side, snap) for side in ("bull", "bear")}
    protocol = call.protocol.number
    lean = version(protocol).lean_prompts

    def ask(task: str, evidence: dict) -> DebateCase:
        side = "bull" if task.startswith("bull") else "bear"

        def right_side(c: DebateCase) -> None:
            if c.side != side:
                raise ValueError(f"side must be {side!r}, got {c.side!r}")

        # from protocol 4 a rebuttal's evidence is its side's case, which was built on these notes
        notes = () if lean and task.endswith("_rebuttal") else recalled[side]
        return structured_pass(
            model,
            task_messages(task, evidence, notes=notes, protocol=protocol),
            DebateCase,
            max_retries=settings.max_repair_retries,
            config=config,
            call=call,
            method=settings.structured_method,
            expect_symbol=sym,
            check=right_side,
            pins={"side": {"type": "string", "const": side}},
        )

    def bear_points():
        return [p for n in bears for p in n["key_points"]]

    def bull_points():
        return [p for n in bulls for p in n["key_points"]]

    def case_evidence(own: list[dict], opposing: list[str]) -> dict:
        evidence = {**base, "notes": own, "key_points": key_points, "opposing_points": opposing}
        if lean and own:  # the panel's key points are the side's notes' and the opposing ones: said once
            del evidence["key_points"]
        return evidence

    build = run_parallel(
        {
            "bull": lambda: ask("bull_build", case_evidence(bulls, bear_points())),
            "bear": lambda: ask("bear_build", case_evidence(bears, bull_points())),
        },
        parallel=settings.parallel_llm,
    )
    bull, bear = build["bull"], build["bear"]

    fallbacks: list[Literal["bull", "bear"]] = []

    def rebut(side: Literal["bull", "bear"], own: DebateCase, other: DebateCase) -> DebateCase:
        try:
            return ask(f"{side}_rebuttal", {**base, "own_case": own.model_dump(), "other_case": other.model_dump()})
        except TickerGuardError:
            raise  # a contract about another symbol fails the state at once, rebuttal or not (PLAN.md)
        except ContractError as e:
            # a failed rebuttal must not sink the debate: that side stands on its first case
            fallbacks.append(side)
            emit("error", {"type": "rebuttal_fallback", "symbol": sym, "side": side, "error": str(e)}, config)
            return own

    rebutted = run_parallel(
        {"bull": lambda: rebut("bull", bull, bear), "bear": lambda: rebut("bear", bear, bull)},
        parallel=settings.parallel_llm,
    )

    verdict = structured_pass(
        model,
        task_messages(
            "manager",
            {
                **base,
                "notes": [_brief(n, points=not lean) for n in panel.notes],
                "bull": rebutted["bull"].model_dump(),
                "bear": rebutted["bear"].model_dump(),
            },
            notes=past_notes(call.recall, config, "manager", snap),
            protocol=protocol,
        ),
        ManagerVerdict,
        max_retries=settings.max_repair_retries,
        config=config,
        call=call,
        method=settings.structured_method,
        expect_symbol=sym,
    )
    conviction, share = calibrate(verdict.conviction, panel.notes, verdict.winner)
    return DebateResult(
        symbol=sym,
        winner=verdict.winner,
        conviction=conviction,
        raw_conviction=verdict.conviction,
        opposition_share=round(share, 4),
        manager_rationale=verdict.manager_rationale,
        key_disagreements=verdict.key_disagreements,
        falsifiers=verdict.falsifiers,
        rebuttals=[rebutted["bull"], rebutted["bear"]],
        rebuttal_fallbacks=sorted(fallbacks),
    )
