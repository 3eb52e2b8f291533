"""What each agent recalls before its prompt is built, and the `retrieval` audit event of it.

The query is the agent's own words plus the regime words of the symbol's setup now (agent/features/regime.py),
so a lesson tagged with a similar setup shares terms with it; the symbol and the cycle's date are filters,
not query terms (the date is point in time: only notes known before it). The recall object the node hands down
(agent/call_context.py CallContext.recall) decides where hits come from: the memory store live, the recording in a
replay; none means memory is off.
"""

from __future__ import annotations

from typing import Optional, Protocol

from langchain_core.runnables import RunnableConfig

from agent.audit_events import emit
from agent.features.regime import regime_words
from schemas.market import MarketSnapshot
from schemas.memory import RetrievalHit

# what each agent is looking for in the past, besides the setup
AGENT_WORDS: dict[str, list[str]] = {
    "technical": ["chart", "trend", "momentum"],
    "news": ["news", "headline"],
    "sentiment": ["sentiment"],
    "fundamental": ["valuation", "fundamentals"],
    "quant": ["indicators"],
    "bull": ["long", "win", "target"],
    "bear": ["loss", "stop", "falsified"],
    "manager": ["long", "conviction"],
    "trader": ["stop", "target", "horizon"],
}


class Recall(Protocol):
    def search(self, *, agent: str, symbol: str, query: str, as_of: str) -> Optional[tuple[dict, list[RetrievalHit]]]:
        """(the filter applied, the hits), or None when this agent recalls nothing (a replay of a cycle
        that recalled nothing for it)."""


def past_notes(
    recall: Optional[Recall], config: RunnableConfig | None, agent: str, snap: MarketSnapshot
) -> list[RetrievalHit]:
    if recall is None:
        return []
    query = " ".join(AGENT_WORDS[agent] + regime_words(snap.bundle.technical))
    found = recall.search(agent=agent, symbol=snap.symbol, query=query, as_of=snap.as_of)
    if found is None:
        return []
    applied, hits = found
    emit(
        "retrieval",
        {
            "agent": agent,
            "symbol": snap.symbol,
            "query": query,
            "filter": applied,
            "hits": [h.model_dump(mode="json") for h in hits],
        },
        config,
    )
    return hits
