"""The chat-model protocol shared by tradegraph's own models (offline, replay).

Tools bind as OpenAI-format tools; structured output binds a `response_format` (the JSON pass of a provider
model may instead offer the contract as its one tool: agent/passes.py), and the audit sees exactly what a real
provider would get.
`include_raw=True` gives LangChain's {raw, parsed, parsing_error} shape without a thread-pool map.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

# what a schema says about data, kept verbatim wherever it appears (a default may well hold a "title" key)
_DATA_KEYWORDS = frozenset({"default", "examples", "example", "const", "enum"})
# keywords whose value maps names (of properties, definitions) to schemas: the names are never keywords
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def lean_schema(node: Any) -> Any:
    """A JSON Schema as sent to a model: without its `title` annotations (Pydantic writes one per model and field,
    about 20% of a contract's schema), which no validator reads (JSON Schema 2020-12, 9.1: annotations). What
    validates is unchanged: types, required, additionalProperties, enums, bounds, descriptions for the model.
    Validation here is always the Pydantic contract itself (`parse_answer`), never this copy."""
    return pruned_schema(node, lambda key, value: key == "title" and isinstance(value, str))


def pruned_schema(node: Any, drop: Callable[[str, Any], bool]) -> Any:
    """The schema without the keywords `drop(key, value)` names, wherever they stand as keywords: the values of
    data keywords are kept verbatim, and the names under properties/$defs are names, never keywords."""
    if isinstance(node, list):
        return [pruned_schema(x, drop) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if drop(key, value):
            continue
        if key in _DATA_KEYWORDS:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: pruned_schema(sub, drop) for name, sub in value.items()}
        else:
            out[key] = pruned_schema(value, drop)
    return out


@functools.lru_cache(maxsize=128)
def response_format(schema: type[BaseModel], method: str = "json_schema") -> dict:
    if method == "json_mode":
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": lean_schema(schema.model_json_schema()), "strict": False},
    }


def answer_text(message: AIMessage) -> str:
    """The JSON an answer carries: a tool call's arguments (function-calling structured output, or a recording
    made with it), else its text (a provider may answer with a list of content blocks)."""
    if message.tool_calls:
        return json.dumps(message.tool_calls[0].get("args", {}))
    if message.invalid_tool_calls:  # arguments that are not JSON: quoted as sent, for the repair prompt
        return str(message.invalid_tool_calls[0].get("args") or "")
    return message.content if isinstance(message.content, str) else message.text


def parse_answer(schema: type[BaseModel]):
    """Raw answer → {raw, parsed, parsing_error}, LangChain's include_raw shape; never raises."""

    def parse(message: AIMessage) -> dict:
        try:
            return {"raw": message, "parsed": schema.model_validate_json(answer_text(message)), "parsing_error": None}
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
            return llm | RunnableLambda(lambda m: schema.model_validate_json(answer_text(m)))
        return llm | RunnableLambda(parse_answer(schema))
