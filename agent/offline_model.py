"""A deterministic offline chat model that reasons from the evidence in its prompt.

It speaks the same protocol as a real chat model: `bind_tools` (returns tool calls),
`with_structured_output` (returns JSON text that is parsed and validated like any model's),
and `usage_metadata` with token estimates, so cost per cycle can be measured offline.
The decisions come from rules over the numbers in the prompt's <EVIDENCE> block
(agent/offline_rules.py): the same prompt always gives the same answer.
"""

from __future__ import annotations

import inspect
import json
import threading
from typing import Any, Optional, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from agent import offline_rules
from agent.json_chat_model import JsonChatModel
from agent.prompts import find_evidence, find_notes


def estimate_tokens(text: str) -> int:
    # ~4 characters per token is the usual rule of thumb for English and JSON
    return max(1, (len(text) + 3) // 4)


# the tokens of a request's tools and response format: the same few objects every call (response_format is cached
# per contract, agent/json_chat_model.py), held with their count
_SCHEMA_TOKENS: dict[int, tuple[Any, int]] = {}


def _schema_tokens(value: Any) -> int:
    held = _SCHEMA_TOKENS.get(id(value))
    if held is not None and held[0] is value:
        return held[1]
    n = estimate_tokens(json.dumps(value))
    if len(_SCHEMA_TOKENS) > 512:
        _SCHEMA_TOKENS.clear()
    _SCHEMA_TOKENS[id(value)] = (value, n)
    return n


def _fetched_indicators(messages: list[BaseMessage]) -> dict[str, Any]:
    """Every value the conversation's get_indicators calls returned, later calls winning."""
    found: dict[str, Any] = {}
    # a provider's wire format names a tool result by its call's id only
    ids = {
        c.get("id")
        for m in messages
        if isinstance(m, AIMessage)
        for c in m.tool_calls
        if c.get("name") == "get_indicators"
    }
    for m in messages:
        if isinstance(m, ToolMessage) and (m.name == "get_indicators" or m.tool_call_id in ids) and m.status != "error":
            try:
                values = json.loads(m.content) if isinstance(m.content, str) else None
            except ValueError:
                values = None
            if isinstance(values, dict):
                found.update(values)
    return found


def _message_text(m: BaseMessage) -> str:
    text = m.content if isinstance(m.content, str) else json.dumps(m.content)
    if isinstance(m, AIMessage) and m.tool_calls:
        text += json.dumps(m.tool_calls, default=str)
    return text


class OfflineChatModel(JsonChatModel):
    model_name: str = "offline-quick"
    # Scripted raw answers, consumed first: {"Plan": ["not json"], "tools:planning": [[{"name":..,"args":..}]]}.
    # Tests and demos use it to make the model misbehave on purpose (malformed JSON, forbidden tools).
    script: dict[str, list[Any]] = Field(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "tradegraph-offline"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _scripted(self, key: str) -> Optional[Any]:
        with self._lock:
            queue = self.script.get(key)
            if queue:
                return queue.pop(0)
        return None

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        evidence = find_evidence(messages) or {}
        task = str(evidence.get("task", ""))
        response_format = kwargs.get("response_format")
        tools = kwargs.get("tools") or []
        if response_format and tools:
            # the separation rule is ours to keep; a request with both is a bug upstream
            raise ValueError("a request may not offer tools and ask for structured output at once")
        if response_format:
            schema_name = response_format["json_schema"]["name"]
            raw = self._scripted(schema_name)
            if task == "quant" and "technical" not in evidence:
                # pass protocol 4: the quant's indicators are what its tools returned, not part of its evidence
                evidence = {**evidence, "technical": _fetched_indicators(messages)}
            if raw is None:
                answer = offline_rules.answer(task, schema_name, evidence, find_notes(messages))
                asked = (response_format["json_schema"].get("schema") or {}).get("properties")
                if asked is not None:  # the fields the schema it was sent asks for (code sets the others)
                    answer = {k: v for k, v in answer.items() if k in asked}
                raw = json.dumps(answer, sort_keys=True)
            message = AIMessage(content=raw)
        elif tools:
            message = self._tool_step(task, evidence, messages, [t["function"]["name"] for t in tools])
        else:
            message = AIMessage(content=offline_rules.prose(task, evidence))
        prompt_tokens = sum(estimate_tokens(_message_text(m)) for m in messages)
        if tools:
            prompt_tokens += estimate_tokens(json.dumps(tools))
        if response_format:
            prompt_tokens += _schema_tokens(response_format)
        out_tokens = estimate_tokens(_message_text(message))
        message.usage_metadata = {
            "input_tokens": prompt_tokens,
            "output_tokens": out_tokens,
            "total_tokens": prompt_tokens + out_tokens,
        }
        message.response_metadata = {"model_name": self.model_name, "finish_reason": "stop"}
        return ChatResult(generations=[ChatGeneration(message=message)])

    # LangChain inspects `_generate`'s signature on every call (does it take run_manager?): computed once here
    cast(Any, _generate).__signature__ = inspect.signature(_generate)

    def _tool_step(self, task: str, evidence: dict, messages: list[BaseMessage], offered: list[str]) -> AIMessage:
        already_called = any(isinstance(m, ToolMessage) for m in messages)
        if already_called:
            n = sum(isinstance(m, ToolMessage) for m in messages)
            return AIMessage(content=f"Reviewed {n} tool result(s); ready to answer.")
        scripted = self._scripted(f"tools:{task}")
        calls = scripted if scripted is not None else offline_rules.tool_plan(task, evidence, offered)
        if not calls:
            return AIMessage(content="No tool needed; the evidence block is sufficient.")
        tool_calls = [
            {"name": c["name"], "args": c.get("args", {}), "id": f"call_{task}_{i}", "type": "tool_call"}
            for i, c in enumerate(calls)
        ]
        return AIMessage(content="", tool_calls=tool_calls)
