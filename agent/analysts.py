"""ANALYZING: four analysts and the quant, each over one symbol's snapshot, never over each other's notes."""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from agent.audit_events import emit
from agent.calibration import ABSTAIN_MODEL
from agent.call_context import CallContext
from agent.call_schema import named_values
from agent.config import AgentConfig
from agent.guards import GuardError, cites
from agent.memory.recall import past_notes
from agent.passes import MODEL_SETS, PASS_PROTOCOL, structured_pass, tool_pass
from agent.prompts import fenced_headlines, render_notes, task_messages
from agent.protocols import version
from agent.providers import model_name_of
from schemas.analysis import AnalystNote, AnalystRole, QuantAnswer
from schemas.market import MarketSnapshot

ABSTAIN_CONFIDENCE = 0.15


# what a fundamental analyst is not shown from protocol 4 (agent/passes.py): where the figures came from, and that
# there are figures; the basis (what each ratio means) and the dates stay
_FUNDAMENTALS_UNSHOWN: set[str] = {"source", "available"}


def analyst_evidence(role: AnalystRole, snap: MarketSnapshot, protocol: int = PASS_PROTOCOL) -> Optional[dict]:
    """The evidence one analyst sees, or None when it has no real data and must abstain."""
    b = snap.bundle
    base = {"symbol": snap.symbol, "as_of": snap.as_of, "price": snap.price, "prev_close": snap.prev_close}
    if role == "technical":
        t = b.technical
        if t.sma20 is None and t.rsi14 is None:
            return None
        return {**base, "technical": t.model_dump(), "forecast": b.forecast.model_dump() if b.forecast else None}
    if role == "news":
        if b.news.unique_count == 0:
            return None
        news = b.news.model_dump(mode="json")
        news["items"] = fenced_headlines(news["items"])
        return {**base, "news": news}
    if role == "sentiment":
        if b.sentiment.news_items == 0 and not b.sentiment.positioning_feed_wired:
            return None
        return {**base, "sentiment": b.sentiment.model_dump()}
    if role == "fundamental":
        if not b.fundamentals.available:
            return None
        return {
            **base,
            "fundamentals": b.fundamentals.model_dump(
                exclude=_FUNDAMENTALS_UNSHOWN if version(protocol).lean_prompts else None
            ),
        }
    raise ValueError(f"unknown analyst role {role!r}")


ABSTAIN_REASON = {
    "technical": "too little price history for indicators",
    "news": "no news in the look-back window",
    "sentiment": "no positioning feed wired and no news to derive sentiment from",
    "fundamental": "no fundamentals source wired for this symbol and date",
}


def abstain(role: AnalystRole, symbol: str) -> AnalystNote:
    return AnalystNote(
        symbol=symbol,
        analyst=role,
        stance=0.0,
        confidence=ABSTAIN_CONFIDENCE,
        summary=f"Abstaining: {ABSTAIN_REASON[role]}.",
        key_points=[],
        subscores={},
        evidence=[],
        model_used=ABSTAIN_MODEL,
    )


def run_analyst(
    role: AnalystRole,
    snap: MarketSnapshot,
    model: BaseChatModel,
    settings: AgentConfig,
    config: RunnableConfig,
    call: CallContext,
) -> AnalystNote:
    protocol = call.protocol.number
    evidence = analyst_evidence(role, snap, protocol)
    if evidence is None:
        note = abstain(role, snap.symbol)
        emit("abstained", {"symbol": snap.symbol, "analyst": role, "reason": ABSTAIN_REASON[role]}, config)
        return note

    def same_role(n: AnalystNote) -> None:
        if n.analyst != role:
            raise ValueError(f"analyst must be {role!r}, got {n.analyst!r}")

    role_pin = {"analyst": {"type": "string", "const": role}}  # same_role, in the schema the call is sent
    model_name = model_name_of(model)
    notes = past_notes(call.recall, config, role, snap)

    def ask(task: str, ev: dict) -> AnalystNote:
        """One structured pass of this analyst: the note, or its critique of the note (the same contract, checks
        and pins)."""
        return structured_pass(
            model,
            task_messages(f"{task}:{role}", ev, notes=notes, protocol=protocol),
            AnalystNote,
            max_retries=settings.max_repair_retries,
            config=config,
            call=call,
            method=settings.structured_method,
            expect_symbol=snap.symbol,
            check=same_role,
            cite_evidence=True,
            pins=role_pin,
        )

    note = ask("analyst", evidence).model_copy(update={"model_used": model_name})
    if note.confidence < settings.self_critique_below:
        code_sets = set(MODEL_SETS["AnalystNote"]) if version(protocol).lean_prompts else None
        revised = ask("critique", {**evidence, "note": note.model_dump(mode="json", exclude=code_sets)})
        note = revised.model_copy(update={"model_used": model_name, "self_critiqued": True})
    return note


def run_quant(
    question: str,
    snap: MarketSnapshot,
    model: BaseChatModel,
    tools: dict[str, BaseTool],
    allowed: frozenset[str],
    settings: AgentConfig,
    config: RunnableConfig,
    call: CallContext,
) -> QuantAnswer:
    tech = snap.bundle.technical.model_dump()
    protocol = call.protocol.number
    notes = past_notes(call.recall, config, "quant", snap)
    if version(protocol).lean_prompts:
        # the indicators come from its tools, which is what the tool pass is for; the notes matter to the answer,
        # not to what to fetch, so they join the structured pass only
        evidence: dict[str, Any] = {"symbol": snap.symbol, "as_of": snap.as_of, "question": question}
        messages = task_messages("quant", evidence, protocol=protocol)
    else:
        evidence = {"symbol": snap.symbol, "as_of": snap.as_of, "question": question, "technical": tech}
        messages = task_messages("quant", evidence, notes=notes, protocol=protocol)
    messages = tool_pass(
        model, messages, tools, allowed, state="ANALYZING", max_steps=settings.max_tool_steps, config=config, call=call
    )
    if version(protocol).lean_prompts and notes:
        messages.append(HumanMessage(content=render_notes(notes, protocol)))

    def cites_only_bundle(ans: QuantAnswer) -> None:
        # the anti-hallucination guard: a metric must be a bundle field with the bundle's value, as written
        # or rounded (a real model copies 66.7226 as 66.72); a number that is not the bundle's still fails
        for name, value in ans.metrics.items():
            if name not in tech:
                raise GuardError(
                    "citation", f"metric {name!r} is not a computed indicator; cite only: {', '.join(sorted(tech))}"
                )
            if not cites(value, tech[name]):
                raise GuardError("citation", f"metric {name}={value} differs from the computed value {tech[name]}")

    return structured_pass(
        model,
        messages,
        QuantAnswer,
        max_retries=settings.max_repair_retries,
        config=config,
        call=call,
        method=settings.structured_method,
        expect_symbol=snap.symbol,
        check=cites_only_bundle,
        cite_evidence=True,
        pins={"metrics": named_values(tech)},
    )
