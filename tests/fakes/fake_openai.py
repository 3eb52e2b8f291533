"""An OpenAI-compatible /v1/chat/completions server for tests, answering with the offline model's rules.

It lets the real ChatOpenAI path (HTTP, the openai SDK, tool calls, json_schema structured output) run
end to end without a network, and it records every request so a test can check the wire format.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from langchain_openai.chat_models.base import _convert_dict_to_message, _convert_message_to_dict

from agent.offline_model import OfflineChatModel


class FakeOpenAI:
    def __init__(self):
        self.requests: list[dict] = []
        self.model = OfflineChatModel(model_name="fake-openai")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                reply = outer.answer(body)
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict) -> dict:
        messages = [_convert_dict_to_message(m) for m in body["messages"]]
        kwargs = {}
        if body.get("tools"):
            kwargs["tools"] = body["tools"]
        if body.get("response_format"):
            kwargs["response_format"] = body["response_format"]
        result = self.model._generate(messages, **kwargs)
        msg = result.generations[0].message
        out = _convert_message_to_dict(msg)
        out.setdefault("content", msg.content or None)
        usage = msg.usage_metadata or {}
        return {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": out, "finish_reason": "tool_calls" if msg.tool_calls else "stop"}],
            "usage": {"prompt_tokens": usage.get("input_tokens", 0), "completion_tokens": usage.get("output_tokens", 0),
                      "total_tokens": usage.get("total_tokens", 0)},
        }
