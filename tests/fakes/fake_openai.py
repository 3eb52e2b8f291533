"""An OpenAI-compatible /v1/chat/completions server for tests, answering with the offline model's rules.

It lets the real ChatOpenAI path (HTTP, the openai SDK, tool calls, structured output as json_schema, json_mode
or a function call) run end to end without a network, and it records every request so a test can check the
wire format. `faults` scripts it to misbehave the way real providers do (rate limits, 5xx, slow answers,
malformed JSON, broken tool calls, truncated answers): each fault is spent on the first request it matches.
`reject_tool_choice=True` makes it an LM Studio: any request carrying `tool_choice` is a 400.
"""

from __future__ import annotations

import time
from typing import Optional

from langchain_core.messages import AIMessage
from langchain_openai.chat_models.base import _convert_dict_to_message, _convert_message_to_dict

from tests.fakes.provider_fake import Asked, FakeProvider, Fault, json_object, schema_asked, split_tools, usage_of

__all__ = ["FakeOpenAI", "Fault"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded"}


class FakeOpenAI(FakeProvider):
    model_name = "fake-openai"

    def __init__(self, reject_tool_choice: bool = False, report_usage: bool = True):
        super().__init__()
        self.reject_tool_choice = reject_tool_choice
        self.report_usage = report_usage  # False: a server that reports no usage (some local ones)
        # fields of the usage report replaced by these (a provider reporting nonsense, e.g. total_tokens -1e9)
        self.usage_override: dict = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def read(self, path: str, body: dict) -> Asked:
        messages = [_convert_dict_to_message(m) for m in body["messages"]]
        tools, schema = split_tools([t["function"]["name"] for t in body.get("tools") or []])
        rf = body.get("response_format")
        if rf:
            named = (rf.get("json_schema") or {}).get("name")
            return Asked(
                messages,
                schema=named or schema_asked(messages),
                method="json_schema" if rf.get("type") == "json_schema" else "json_mode",
            )
        return Asked(messages, tools=tools, schema=schema, method="function_calling" if schema else None)

    def refuse(self, body: dict) -> Optional[int]:
        return 400 if self.reject_tool_choice and "tool_choice" in body else None

    def reply(self, body: dict, asked: Asked, answer: AIMessage, fault: Optional[Fault]) -> dict:
        out = _convert_message_to_dict(answer)
        out.setdefault("content", answer.content or None)
        finish = "tool_calls" if answer.tool_calls else "stop"
        if asked.method == "function_calling":  # the contract comes back as the call of its one tool
            text = str(answer.content)  # the contract's JSON: the offline model answers with text
            text = fault.hostile(text) if fault else text
            out = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{asked.schema}_{len(self.requests)}",
                        "type": "function",
                        "function": {"name": asked.schema, "arguments": text},
                    }
                ],
            }
            finish = "tool_calls" if json_object(text) is not None else "stop"
        elif fault is not None and fault.content is not None:
            out["content"] = fault.hostile(out.get("content") or "")
        if fault is not None:
            if fault.tool_calls is not None:
                out["tool_calls"], out["content"], finish = fault.tool_calls, None, "tool_calls"
            finish = fault.finish_reason or finish
        usage = usage_of(answer)
        reply = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": out, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
                **self.usage_override,
            },
        }
        if not self.report_usage:
            del reply["usage"]
        return reply

    def error_body(self, status: int) -> dict:
        message = (
            "'tool_choice' is not supported by this server"
            if status == 400 and self.reject_tool_choice
            else f"fake provider error {status}"
        )
        return {
            "error": {
                "message": message,
                "type": _ERROR_TYPES.get(status, "server_error"),
                "param": None,
                "code": _ERROR_TYPES.get(status),
            }
        }
