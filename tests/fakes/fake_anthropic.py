"""A local Anthropic Messages API (POST /v1/messages) answering with the offline model's rules.

The real ChatAnthropic (langchain-anthropic over the anthropic SDK) runs a whole cycle against it: content
blocks (text, tool_use, tool_result), the system prompt, tools with forced `tool_choice` for function-calling
structured output and `output_config.format` for JSON-schema output, usage, stop reasons, and Anthropic's error
bodies. Faults as for fake_openai; `Fault.tool_calls` are raw `tool_use` blocks, `finish_reason` a stop_reason.
"""

from __future__ import annotations

from typing import Optional

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from tests.fakes.provider_fake import Asked, FakeProvider, Fault, json_object, schema_asked, split_tools, usage_of

__all__ = ["FakeAnthropic", "Fault"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def to_messages(body: dict) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    if body.get("system"):
        out.append(SystemMessage(content=_text(body["system"])))
    for m in body["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if m["role"] == "assistant":
            calls = [
                {"name": b["name"], "args": b.get("input") or {}, "id": b["id"], "type": "tool_call"}
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            out.append(AIMessage(content=_text(blocks), tool_calls=calls))
            continue
        for b in blocks:  # a user turn may carry tool results and text together
            if b.get("type") == "tool_result":
                out.append(ToolMessage(content=_text(b.get("content")), tool_call_id=b["tool_use_id"]))
            elif b.get("type") == "text":
                out.append(HumanMessage(content=b["text"]))
    return out


class FakeAnthropic(FakeProvider):
    model_name = "fake-anthropic"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def read(self, path: str, body: dict) -> Asked:
        messages = to_messages(body)
        if (body.get("output_config") or {}).get("format"):
            return Asked(messages, schema=schema_asked(messages), method="json_schema")
        tools, schema = split_tools([t["name"] for t in body.get("tools") or []])
        return Asked(messages, tools=tools, schema=schema, method="function_calling" if schema else None)

    def reply(self, body: dict, asked: Asked, answer: AIMessage, fault: Optional[Fault]) -> dict:
        text = fault.hostile(answer.content) if fault and asked.schema else answer.content
        if asked.method == "function_calling" and json_object(text) is not None:
            blocks = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{asked.schema}_{len(self.requests)}",
                    "name": asked.schema,
                    "input": json_object(text),
                }
            ]
        elif answer.tool_calls:
            blocks = [
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in answer.tool_calls
            ]
        else:
            blocks = [{"type": "text", "text": fault.hostile(text) if fault and not asked.schema else text}]
        if fault is not None and fault.tool_calls is not None:
            blocks = fault.tool_calls
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        usage = usage_of(answer)
        return {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": blocks,
            "stop_reason": (fault.finish_reason if fault and fault.finish_reason else stop),
            "stop_sequence": None,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]},
        }

    def error_body(self, status: int) -> dict:
        return {
            "type": "error",
            "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": f"fake anthropic error {status}"},
        }
