"""An OpenAI-compatible /v1/chat/completions server for tests, answering with the offline model's rules.

It lets the real ChatOpenAI path (HTTP, the openai SDK, tool calls, json_schema structured output) run
end to end without a network, and it records every request so a test can check the wire format.
`faults` scripts it to misbehave the way real providers do (rate limits, 5xx, slow answers, malformed
JSON, broken tool calls, truncated answers): each fault is spent on the first request it matches.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional, Union

from langchain_openai.chat_models.base import _convert_dict_to_message, _convert_message_to_dict

from agent.offline_model import OfflineChatModel

_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded"}


@dataclass
class Fault:
    """One scripted misbehaviour, used by the first request it matches."""

    # "any" | "tools" (a tool pass) | "json" (a JSON pass) | a schema name such as "Plan"
    when: str = "any"
    status: int = 200  # anything else: an OpenAI-style error body with this status
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # answer this late: longer than the client's timeout is a timeout
    # replaces the answer's content; a callable gets the honest content and returns the hostile one
    content: Union[str, Callable[[str], str], None] = None
    tool_calls: Optional[list[dict]] = None  # raw OpenAI tool_calls, e.g. arguments that are not JSON
    finish_reason: Optional[str] = None

    def matches(self, body: dict) -> bool:
        if self.when == "any":
            return True
        if self.when == "tools":
            return bool(body.get("tools"))
        rf = body.get("response_format") or {}
        if self.when == "json":
            return bool(rf)
        return (rf.get("json_schema") or {}).get("name") == self.when


class FakeOpenAI:
    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[Optional[int]] = []  # the HTTP status answered to each request, in arrival order
        self.faults: list[Fault] = []
        self.model = OfflineChatModel(model_name="fake-openai")
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fault = outer._take(body)
                status = fault.status if fault else 200
                with outer._lock:
                    outer.requests.append(body)
                    # a late answer is scripted as a timeout: the client never sees its status
                    outer.statuses.append(None if fault and fault.delay_s else status)
                if fault and fault.delay_s:
                    time.sleep(fault.delay_s)
                reply = outer.answer(body, fault) if status == 200 else _error_body(status)
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    for k, v in (fault.headers if fault else {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): that is the fault being tested

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
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

    def _take(self, body: dict) -> Optional[Fault]:
        with self._lock:
            for i, fault in enumerate(self.faults):
                if fault.matches(body):
                    return self.faults.pop(i)
        return None

    def answer(self, body: dict, fault: Optional[Fault] = None) -> dict:
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
        finish = "tool_calls" if msg.tool_calls else "stop"
        if fault is not None:
            if fault.content is not None:
                out["content"] = fault.content(out.get("content") or "") if callable(fault.content) else fault.content
            if fault.tool_calls is not None:
                out["tool_calls"], out["content"], finish = fault.tool_calls, None, "tool_calls"
            finish = fault.finish_reason or finish
        usage = msg.usage_metadata or {}
        return {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": out, "finish_reason": finish}],
            "usage": {"prompt_tokens": usage.get("input_tokens", 0), "completion_tokens": usage.get("output_tokens", 0),
                      "total_tokens": usage.get("total_tokens", 0)},
        }


def _error_body(status: int) -> dict:
    return {"error": {"message": f"fake provider error {status}", "type": _ERROR_TYPES.get(status, "server_error"),
                      "param": None, "code": _ERROR_TYPES.get(status)}}
