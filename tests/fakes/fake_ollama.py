"""A local Ollama chat API (POST /api/chat) answering with the offline model's rules.

The real ChatOllama (langchain-ollama over the ollama client and httpx) runs a whole cycle against it: streamed
NDJSON chunks (or one object when `stream` is false), tool calls whose arguments are objects and carry no id,
`format` as a JSON Schema (json_schema) or "json" (json_mode), eval counts as usage, and `{"error": …}` bodies.
Faults as for fake_openai; `Fault.tool_calls` are raw Ollama tool calls, `finish_reason` a done_reason.
"""

from __future__ import annotations

import time
from typing import Optional

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from tests.fakes.provider_fake import Asked, FakeProvider, Fault, json_object, schema_asked, split_tools, usage_of

__all__ = ["FakeOllama", "Fault"]


def to_messages(body: dict) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i, m in enumerate(body["messages"]):
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            out.append(SystemMessage(content=content))
        elif role == "user":
            out.append(HumanMessage(content=content))
        elif role == "assistant":
            calls = [
                {
                    "name": c["function"]["name"],
                    "args": c["function"].get("arguments") or {},
                    "id": c.get("id") or f"call_{i}_{j}",
                    "type": "tool_call",
                }
                for j, c in enumerate(m.get("tool_calls") or [])
            ]
            out.append(AIMessage(content=content, tool_calls=calls))
        elif role == "tool":
            out.append(ToolMessage(content=content, tool_call_id=m.get("tool_call_id") or f"tool_{i}"))
    return out


class FakeOllama(FakeProvider):
    model_name = "fake-ollama"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def read(self, path: str, body: dict) -> Asked:
        messages = to_messages(body)
        fmt = body.get("format")
        if fmt:
            named = fmt.get("title") if isinstance(fmt, dict) else None
            return Asked(
                messages, schema=named or schema_asked(messages), method="json_mode" if fmt == "json" else "json_schema"
            )
        tools, schema = split_tools([t["function"]["name"] for t in body.get("tools") or []])
        return Asked(messages, tools=tools, schema=schema, method="function_calling" if schema else None)

    def reply(self, body: dict, asked: Asked, answer: AIMessage, fault: Optional[Fault]) -> list[dict] | dict:
        text = answer.content
        if fault is not None and fault.content is not None:
            text = fault.hostile(text)
        message: dict = {"role": "assistant", "content": text}
        if asked.method == "function_calling" and json_object(text) is not None:
            message = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": asked.schema, "arguments": json_object(text)}}],
            }
        elif answer.tool_calls:
            message = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": c["name"], "arguments": c["args"]}} for c in answer.tool_calls],
            }
        if fault is not None and fault.tool_calls is not None:
            message = {"role": "assistant", "content": "", "tool_calls": fault.tool_calls}
        usage = usage_of(answer)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        done = {
            "model": body.get("model", "fake"),
            "created_at": stamp,
            "done": True,
            "done_reason": (fault.finish_reason if fault and fault.finish_reason else "stop"),
            "total_duration": 1_000_000,
            "prompt_eval_count": usage["input_tokens"],
            "eval_count": usage["output_tokens"],
        }
        if not body.get("stream", True):
            return {**done, "message": message}
        # the answer in two chunks, then the final one with the counts: the client joins them
        content = message["content"]
        cut = len(content) // 2
        first = {
            "model": body.get("model", "fake"),
            "created_at": stamp,
            "done": False,
            "message": {**message, "content": content[:cut]},
        }
        second = {
            "model": body.get("model", "fake"),
            "created_at": stamp,
            "done": False,
            "message": {"role": "assistant", "content": content[cut:]},
        }
        return [first, second, {**done, "message": {"role": "assistant", "content": ""}}]

    def error_body(self, status: int) -> dict:
        return {"error": f"fake ollama error {status}"}
