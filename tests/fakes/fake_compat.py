"""OpenAI-compatible local servers as each answers (issue 31): llama.cpp's Python server, Ollama's /v1, vLLM and
LM Studio differ in the structured-output methods they take, what /v1/models says and how they refuse a prompt
too long for the model. Each flavour is FakeOpenAI (the offline model's answers) plus those differences, taken from
the servers' code or documentation:

- llama_cpp (llama-cpp-python[server] 0.3.x): `json_schema` is a 500 (its response_format takes only text and
  json_object, ANCHORS.md); `json_object` with a `schema` is constrained by it; a tool is called only when
  tool_choice names it (else tools are ignored); /v1/models lists {id, object, owned_by: "me", permissions}, no
  window; a prompt past n_ctx is a 400 "This model's maximum context length is N tokens…" (server/errors.py).
- ollama (/v1): json_schema and json_object taken; tool_choice ignored; no window in /v1/models; an oversized
  prompt is truncated silently (200).
- vllm: json_schema, json_object and named tool_choice taken; /v1/models carries max_model_len; an oversized prompt
  is a 400 "This model's maximum context length is N tokens…".
- lmstudio: json_schema taken; json_object a 400 ("'response_format.type' must be 'json_schema' or 'text'");
  any tool_choice a 400; no window in /v1/models; an oversized prompt a 400 naming its context length.
"""

from __future__ import annotations

import json
import time
from typing import Optional

from tests.fakes.fake_openai import FakeOpenAI

FLAVOURS = ("llama_cpp", "ollama", "vllm", "lmstudio")
PROBE = "Is 2 greater than 1?"


class FakeCompat(FakeOpenAI):
    def __init__(self, flavour: str, model: str = "local-model", n_ctx: int = 8192):
        super().__init__(reject_tool_choice=flavour == "lmstudio")
        assert flavour in FLAVOURS
        self.flavour, self.model_id, self.n_ctx = flavour, model, n_ctx
        self.model_name = model

    # -------------------------------------------------------------------------------------------- GET /v1/models
    def get(self, path: str) -> tuple[int, dict]:
        if not path.rstrip("/").endswith("/v1/models"):
            return 404, {"error": {"message": f"Unexpected endpoint {path}"}}
        entry: dict = {"id": self.model_id, "object": "model"}
        entry.update(
            {
                "llama_cpp": {"owned_by": "me", "permissions": []},
                "ollama": {"created": 1732000000, "owned_by": "library"},
                "vllm": {"owned_by": "vllm", "max_model_len": self.n_ctx, "root": self.model_id},
                "lmstudio": {"owned_by": "organization_owner"},
            }[self.flavour]
        )
        return 200, {"object": "list", "data": [entry]}

    # -------------------------------------------------------------------------------------------- POST
    def refusal(self, body: dict) -> Optional[tuple[int, str]]:
        rf = (body.get("response_format") or {}).get("type")
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4
        if self.flavour == "llama_cpp":
            if rf == "json_schema":
                return (
                    500,
                    "1 validation error for ChatCompletionRequestResponseFormat type: Input should be "
                    "'text' or 'json_object' [type=literal_error, input_value='json_schema']",
                )
            if prompt_tokens > self.n_ctx:
                return 400, (
                    f"This model's maximum context length is {self.n_ctx} tokens, however you "
                    f"requested {prompt_tokens} tokens ({prompt_tokens} in your prompt)"
                )
        if self.flavour == "vllm" and prompt_tokens > self.n_ctx:
            return 400, (
                f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                f"{prompt_tokens} tokens in the messages"
            )
        if self.flavour == "lmstudio":
            if rf == "json_object":
                return 400, "'response_format.type' must be 'json_schema' or 'text'"
            if "tool_choice" in body:
                return 400, "'tool_choice' is not supported by this server"
            if prompt_tokens > self.n_ctx:
                return 400, (
                    f"Trying to keep the first {prompt_tokens} tokens when context the overflows. "
                    f"However, the model is loaded with context length of {self.n_ctx}"
                )
        return None

    def serve(self, handler, body: dict) -> None:
        refused = self.refusal(body)
        probe = any(PROBE in str(m.get("content") or "") for m in body.get("messages", []))
        if refused is None and not probe:
            return super().serve(handler, body)
        with self._lock:
            self.requests.append(body)
            self.statuses.append(refused[0] if refused else 200)
        if refused:
            status, out = (
                refused[0],
                {
                    "error": {
                        "message": refused[1],
                        "type": "invalid_request_error" if refused[0] < 500 else "internal_server_error",
                    }
                },
            )
        else:
            status, out = 200, self.probe_reply(body)
        data = json.dumps(out).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def probe_reply(self, body: dict) -> dict:
        """The tiny contract answered as the flavour does: a named tool_choice gives a call (Ollama ignores
        tool_choice and calls it anyway, as a model offered one tool does); llama.cpp ignores tools otherwise."""
        answer = '{"answer": "yes"}'
        choice = body.get("tool_choice")
        calls = body.get("tools") and (self.flavour != "llama_cpp" or isinstance(choice, dict))
        if calls:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_probe", "type": "function", "function": {"name": "Probe", "arguments": answer}}
                ],
            }
        elif body.get("tools"):  # llama.cpp without a named tool_choice: prose, the tools never shown
            message = {"role": "assistant", "content": "Yes, 2 is greater than 1."}
        else:
            message = {"role": "assistant", "content": answer}
        return {
            "id": "chatcmpl-probe",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36},
        }
