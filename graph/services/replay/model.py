"""What a replay runs with instead of live inputs: recorded LLM answers, bundles and execution.

`ReplayChatModel` speaks the chat-model protocol the states use (`bind_tools`,
`with_structured_output`, usage metadata) like agent/offline_model.py, but answers every request
with the response recorded for the SAME request. Requests are matched by a hash of what the
model was shown (messages' type, content and tool calls; the tools offered; the structured
output asked for), each hash with a FIFO queue of recorded answers: parallel calls may have been
recorded in any order, but prompts are deterministic, so the hash finds the right answer.
It never calls a live model, whatever model the session was recorded with.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any, Optional

from langchain_core.messages import AIMessage, BaseMessage, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from agent.json_chat_model import JsonChatModel
from graph.machine.audit import offered_tool_names, structured_output_name, to_plain
from schemas.decision import Decision, DecisionResult
from schemas.features import FeatureBundle
from schemas.memory import RetrievalHit
from schemas.portfolio import PortfolioSnapshot


class ReplayMismatch(RuntimeError):
    """The replay asked for something the recording does not hold: the run has diverged."""


# ---------------------------------------------------------------------------- request matching
def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _message_part(m: dict) -> list:
    return [m.get("type"), m.get("content"), m.get("tool_calls") or []]


def request_key(messages: list[dict], tools: Iterable[str], structured: Optional[str]) -> str:
    return _digest([[_message_part(m) for m in messages], sorted(tools), structured])


def messages_key(messages: list[dict]) -> str:
    """Looser key: the messages alone. Covers structured-output methods whose binding differs
    between the recording client and this model (e.g. function_calling tools vs response_format)."""
    return _digest([_message_part(m) for m in messages])


class _Entry:
    __slots__ = ("call", "used")

    def __init__(self, call):
        self.call = call
        self.used = False


class RecordedResponses:
    """The cycle's recorded LLM answers, queued FIFO per request hash; thread-safe."""

    def __init__(self, calls) -> None:
        self._exact: dict[str, deque[_Entry]] = {}
        self._loose: dict[str, deque[_Entry]] = {}
        self._lock = threading.Lock()
        self.misses: list[str] = []
        self._entries = []
        # a failed attempt followed by the same request was retried (agent/passes.py): the replay asks
        # once and needs only the answer that was used
        retried, later = set(), set()
        for call in reversed(calls):
            key = request_key(call.messages, call.tools, call.structured_output)
            if call.error and call.finish_reason != "length" and key in later:
                retried.add(id(call))
            later.add(key)
        for call in calls:
            if not call.answered or not call.messages or id(call) in retried:
                continue  # a request without an answer can't be replayed; asking for it is a miss
            e = _Entry(call)
            self._entries.append(e)
            self._exact.setdefault(request_key(call.messages, call.tools, call.structured_output), deque()).append(e)
            self._loose.setdefault(messages_key(call.messages), deque()).append(e)

    @staticmethod
    def _take(queue: Optional[deque]) -> Optional[_Entry]:
        while queue:
            e = queue.popleft()
            if not e.used:
                e.used = True
                return e
        return None

    def answer(self, messages: list[dict], tools: list[str], structured: Optional[str], state: str):
        with self._lock:
            e = self._take(self._exact.get(request_key(messages, tools, structured)))
            if e is None:
                e = self._take(self._loose.get(messages_key(messages)))
            if e is None:
                self.misses.append(state)
                raise ReplayMismatch(
                    f"no recorded LLM response matches this request in state {state} "
                    f"(tools={tools}, structured_output={structured}): the replay diverged"
                )
            return e.call

    @property
    def unused(self) -> int:
        return sum(not e.used for e in self._entries)


# ---------------------------------------------------------------------------- the model
class ReplayChatModel(JsonChatModel):
    model_name: str = "replay"
    responses: Any = None  # RecordedResponses, shared by the quick and deep tiers
    model_config = ConfigDict(arbitrary_types_allowed=True)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "tradegraph-replay"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        state = ((run_manager.metadata if run_manager else None) or {}).get("langgraph_node", "?")
        call = self.responses.answer(
            [to_plain(m) for m in messages], offered_tool_names(kwargs), structured_output_name(kwargs), state
        )
        if call.error and call.finish_reason != "length":
            # the recorded call failed: fail the same way, so the state takes the same error path
            raise RuntimeError(call.error)
        # a truncated answer (finish_reason "length") is replayed as the cut-off text it was, for the same repair
        message = AIMessage(
            content=call.text if call.text is not None else "",
            tool_calls=[
                {"name": t["name"], "args": t.get("args", {}), "id": t.get("id"), "type": "tool_call"}
                for t in call.tool_calls
            ],
            invalid_tool_calls=[
                {
                    "name": t.get("name"),
                    "args": t.get("args"),
                    "id": t.get("id"),
                    "error": t.get("error"),
                    "type": "invalid_tool_call",
                }
                for t in call.invalid_tool_calls
            ],
        )
        usage = call.usage or {}
        if all(k in usage for k in ("input_tokens", "output_tokens", "total_tokens")):
            message.usage_metadata = UsageMetadata(
                input_tokens=int(usage["input_tokens"]),
                output_tokens=int(usage["output_tokens"]),
                total_tokens=int(usage["total_tokens"]),
            )
        message.response_metadata = {
            "model_name": call.model or self.model_name,
            "replayed": True,
            "finish_reason": call.finish_reason,
        }
        return ChatResult(generations=[ChatGeneration(message=message)])


def tier_models(cycle, config=None) -> tuple[str, str]:
    """The quick and deep model names the cycle was recorded with (analysts' notes name them)."""
    if config is not None:
        return config.quick_model, config.deep_model
    quick = next(
        (c.model for c in cycle.llm_calls if c.state in ("PLANNING", "ANALYZING", "MEMORIZING") and c.model), None
    )
    deep = next((c.model for c in cycle.llm_calls if c.state == "DECIDING" and c.model and c.model != quick), None)
    quick = quick or "offline-quick"
    if deep is None:
        deep = {"offline-quick": "offline-deep", "gpt-4o-mini": "gpt-4o"}.get(quick, quick)
    return quick, deep


# ---------------------------------------------------------------------------- data and execution
def recorded_bundles(scan: dict):
    """SCANNING's bundle source: the FeatureBundles the recording's MarketScan carried."""
    bundles = {s["symbol"]: s["bundle"] for s in scan["snapshots"]}

    def source(symbol: str, as_of: str) -> FeatureBundle:
        if symbol not in bundles:
            raise ReplayMismatch(f"the recording has no bundle for {symbol}")
        return FeatureBundle.model_validate(bundles[symbol])

    return source


class ReplayExecution:
    """Returns the recorded DecisionResult and portfolio; never touches a ledger or a portfolio store."""

    def __init__(self, recorded: Optional[dict]) -> None:
        self.recorded = recorded

    def lookup(self, cycle_id: str) -> Optional[dict]:
        # a recording that itself came from the ledger replays through the same branch
        if self.recorded and self.recorded.get("replayed_from_ledger"):
            return self.recorded
        return None

    def execute(self, decision: Decision, **_: Any) -> tuple[DecisionResult, PortfolioSnapshot]:
        if self.recorded is None:
            raise ReplayMismatch("the replay reached EXECUTING but the recording has no execution for this cycle")
        return (
            DecisionResult.model_validate(self.recorded["result"]),
            PortfolioSnapshot.model_validate(self.recorded["portfolio_after"]),
        )

    def version(self, session_id: str) -> Optional[int]:
        return None  # the recording is the truth: no stored portfolio to compare against

    def record(self, cycle_id: str, session_id: str, result: dict, *, base_version: Optional[int] = None) -> bool:
        return True

    def settle_exits(self, cycle_id: str, session_id: str, **_: Any) -> Optional[int]:
        # SCANNING takes a replay's exits from the recorded scan and never settles them again
        raise ReplayMismatch("the replay tried to close positions the recording did not close")


class RecordedRecall:
    """A replay's recall: each agent gets the notes its recording got, however much memory has grown (or
    been forgotten) since. An agent that recalled nothing in the recording recalls nothing here."""

    def __init__(self, retrievals: list[dict]) -> None:
        self.recorded = {(r.get("agent"), r.get("symbol")): r for r in retrievals}
        self.misses: list[str] = []

    def search(self, *, agent: str, symbol: str, query: str, as_of: str):
        rec = self.recorded.get((agent, symbol))
        if rec is None:
            return None
        if rec.get("query") != query:  # the setup the query came from differs: worth saying, not hiding
            self.misses.append(f"{agent}/{symbol}: query {query!r} was {rec.get('query')!r} when recorded")
        return rec.get("filter") or {}, [RetrievalHit.model_validate(h) for h in rec.get("hits") or []]
