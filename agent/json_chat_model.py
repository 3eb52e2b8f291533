"""The chat-model protocol shared by tradegraph's own models (offline, replay).

Tools bind as OpenAI-format tools; structured output binds a `response_format` (never a tool),
so a JSON pass is never a tool call, and the audit sees exactly what a real provider would get.
`include_raw=True` gives LangChain's {raw, parsed, parsing_error} shape without a thread-pool map.
"""
from __future__ import annotations

import functools
import json

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.utils.function_calling import convert_to_openai_tool


@functools.lru_cache(maxsize=128)
def response_format(schema: type, method: str = "json_schema") -> dict:
    if method == "json_mode":
        return {"type": "json_object"}
    return {"type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": False}}


def _answer_text(message: AIMessage) -> str:
    # a recording made with function-calling structured output carries the JSON as tool-call args
    if not message.content and message.tool_calls:
        return json.dumps(message.tool_calls[0].get("args", {}))
    return message.content


def parse_answer(schema: type):
    """Raw answer → {raw, parsed, parsing_error}, LangChain's include_raw shape; never raises."""

    def parse(message: AIMessage) -> dict:
        try:
            return {"raw": message, "parsed": schema.model_validate_json(_answer_text(message)), "parsing_error": None}
        except ValueError as e:
            return {"raw": message, "parsed": None, "parsing_error": e}

    return parse


class JsonChatModel(BaseChatModel):
    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def with_structured_output(self, schema, *, include_raw: bool = False, method: str = "json_schema", **kwargs):
        rf = response_format(schema, method)
        llm = self.bind(response_format=rf, ls_structured_output_format={"schema": rf})
        if not include_raw:
            return llm | RunnableLambda(lambda m: schema.model_validate_json(_answer_text(m)))
        return llm | RunnableLambda(parse_answer(schema))
