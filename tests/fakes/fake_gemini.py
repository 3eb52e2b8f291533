"""A local Gemini API (POST /v1beta/models/{model}:generateContent) answering with the offline model's rules.

The real ChatGoogleGenerativeAI (langchain-google-genai over the google-genai SDK) runs a whole cycle against it:
`contents` with text, functionCall and functionResponse parts, the system instruction, function declarations with
a forced `toolConfig` (function-calling structured output), `responseJsonSchema` or a bare JSON mime type
(json_schema, json_mode), usage, finish reasons, and Google's error bodies (a 429 states its wait as a
google.rpc.RetryInfo `retryDelay`). Faults as for fake_openai; `Fault.tool_calls` are raw functionCall parts,
`finish_reason` a finishReason; `retry_delay` puts a RetryInfo into the next 429's body.
"""

from __future__ import annotations

import json
from typing import Optional

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from tests.fakes.provider_fake import Asked, FakeProvider, Fault, json_object, schema_asked, split_tools, usage_of

__all__ = ["FakeGemini", "Fault"]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def _text(parts) -> str:
    return "".join(p.get("text", "") for p in parts or [] if "text" in p and not p.get("thought"))


def to_messages(body: dict) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    system = body.get("systemInstruction") or body.get("system_instruction")
    if system:
        out.append(SystemMessage(content=_text(system.get("parts"))))
    for i, c in enumerate(body.get("contents") or []):
        parts = c.get("parts") or []
        if c.get("role") == "model":
            calls = [
                {
                    "name": p["functionCall"]["name"],
                    "args": p["functionCall"].get("args") or {},
                    "id": p["functionCall"].get("id") or f"call_{i}_{j}",
                    "type": "tool_call",
                }
                for j, p in enumerate(parts)
                if "functionCall" in p
            ]
            out.append(AIMessage(content=_text(parts), tool_calls=calls))
            continue
        for j, p in enumerate(parts):
            if "functionResponse" in p:
                r = p["functionResponse"]
                out.append(
                    ToolMessage(content=json.dumps(r.get("response")), tool_call_id=r.get("id") or f"fn_{i}_{j}")
                )
            elif "text" in p:
                out.append(HumanMessage(content=p["text"]))
    return out


class FakeGemini(FakeProvider):
    model_name = "fake-gemini"

    def __init__(self):
        super().__init__()
        self.retry_delay: Optional[str] = None  # e.g. "1s": the RetryInfo a 429 carries

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def read(self, path: str, body: dict) -> Asked:
        messages = to_messages(body)
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            named = schema.get("title") if isinstance(schema, dict) else None
            return Asked(
                messages, schema=named or schema_asked(messages), method="json_schema" if schema else "json_mode"
            )
        names = [d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]
        tools, schema = split_tools(names)
        return Asked(messages, tools=tools, schema=schema, method="function_calling" if schema else None)

    def forces_tool(self, body: dict) -> bool:
        return ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode") == "ANY"

    def reply(self, body: dict, asked: Asked, answer: AIMessage, fault: Optional[Fault]) -> dict:
        text = fault.hostile(answer.content) if fault else answer.content
        if asked.method == "function_calling" and json_object(text) is not None:
            parts = [{"functionCall": {"name": asked.schema, "args": json_object(text)}}]
        elif answer.tool_calls:
            parts = [{"functionCall": {"name": c["name"], "args": c["args"]}} for c in answer.tool_calls]
        else:
            parts = [{"text": text}]
        if fault is not None and fault.tool_calls is not None:
            parts = fault.tool_calls
        usage = usage_of(answer)
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "index": 0,
                    "finishReason": (fault.finish_reason if fault and fault.finish_reason else "STOP"),
                }
            ],
            "usageMetadata": {
                "promptTokenCount": usage["input_tokens"],
                "candidatesTokenCount": usage["output_tokens"],
                "totalTokenCount": usage["total_tokens"],
            },
            "modelVersion": "fake-gemini",
        }

    def error_body(self, status: int) -> dict:
        error = {"code": status, "message": f"fake gemini error {status}", "status": _STATUS.get(status, "UNKNOWN")}
        if status == 429 and self.retry_delay:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": self.retry_delay}]
        return {"error": error}
