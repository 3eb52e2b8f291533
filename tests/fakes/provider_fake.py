"""What every local fake provider shares: an HTTP server on loopback that records each request, spends scripted
faults, and answers with the offline model's rules, so the real LangChain provider class runs a full cycle.

A provider's fake (fake_openai, fake_anthropic, fake_ollama, fake_gemini) only translates: its wire request into
LangChain messages plus what was asked (`Asked`: the tool pass's tools, or the contract of a JSON pass and how it
was asked for), and the offline model's answer back into its wire format. The offline model (the same rules as
`tradegraph run` offline) then answers the real agent's prompts with contract-valid JSON.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Union

from langchain_core.messages import AIMessage, BaseMessage

from agent.offline_model import OfflineChatModel
from agent.tools import TOOLS

_INSTRUCTION = re.compile(r"Reply with only a JSON object for the (\w+) schema")


@dataclass
class Fault:
    """One scripted misbehaviour, used by the first request it matches."""

    # "any" | "tools" (a tool pass) | "json" (a JSON pass) | a schema name such as "Plan"
    when: str = "any"
    status: int = 200  # anything else: the provider's error body with this status
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # answer this late: longer than the client's timeout is a timeout
    # replaces the answer's content (a JSON pass: the JSON text); a callable gets the honest one, returns the hostile one
    content: Union[str, Callable[[str], str], None] = None
    tool_calls: Optional[list[dict]] = None  # raw tool calls in the provider's own wire format
    finish_reason: Optional[str] = None  # in the provider's own words ("length", "max_tokens", "MAX_TOKENS")

    def matches(self, asked: Asked) -> bool:
        if self.when == "any":
            return True
        if self.when == "tools":
            return bool(asked.tools)
        if self.when == "json":
            return asked.schema is not None
        return asked.schema == self.when

    def hostile(self, honest: str) -> str:
        if self.content is None:
            return honest
        return self.content(honest) if callable(self.content) else self.content


@dataclass
class Asked:
    """What one request asked for, read from its wire format."""

    messages: list[BaseMessage]
    tools: list[str] = field(default_factory=list)  # a tool pass: the state's tools offered
    schema: Optional[str] = None  # a JSON pass: the contract's name
    method: Optional[str] = None  # json_schema | json_mode | function_calling


def schema_asked(messages: Iterable[BaseMessage]) -> Optional[str]:
    """The contract a JSON pass asks for, from the instruction every JSON pass ends its prompt with (a json_mode
    request carries no schema name)."""
    for m in reversed(list(messages)):
        found = _INSTRUCTION.search(m.content if isinstance(m.content, str) else "")
        if found:
            return found.group(1)
    return None


def split_tools(names: list[str]) -> tuple[list[str], Optional[str]]:
    """(the state's tools, None) for a tool pass; ([], contract) when the one tool offered is a contract:
    function-calling structured output inside a JSON pass."""
    if len(names) == 1 and names[0] not in TOOLS:
        return [], names[0]
    return names, None


def offline_answer(model: OfflineChatModel, asked: Asked) -> AIMessage:
    """The offline model's answer, with its token estimate: JSON text for a JSON pass, tool calls or prose else."""
    kwargs: dict = {}
    if asked.schema:
        kwargs["response_format"] = {"type": "json_schema", "json_schema": {"name": asked.schema}}
    elif asked.tools:
        kwargs["tools"] = [{"type": "function", "function": {"name": n}} for n in asked.tools]
    message = model._generate(asked.messages, **kwargs).generations[0].message
    assert isinstance(message, AIMessage)  # a chat model's generation is an AIMessage
    return message


def json_object(text: str) -> Optional[dict]:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class FakeProvider:
    """The HTTP server, the record of requests and statuses, and the faults; subclasses speak a wire format."""

    model_name = "fake"

    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[Optional[int]] = []  # the HTTP status answered to each request, in arrival order
        self.faults: list[Fault] = []
        self.model = OfflineChatModel(model_name=self.model_name)
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.serve(self, body)

            def do_GET(self):
                status, out = outer.get(self.path)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ a provider's wire format
    def read(self, path: str, body: dict) -> Asked:
        raise NotImplementedError

    def reply(self, body: dict, asked: Asked, answer: AIMessage, fault: Optional[Fault]) -> Union[dict, list[dict]]:
        """The success body; a list is streamed as NDJSON lines."""
        raise NotImplementedError

    def error_body(self, status: int) -> dict:
        raise NotImplementedError

    def forces_tool(self, body: dict) -> bool:
        """Whether the request forces a tool call (tool_choice in OpenAI's and Anthropic's words)."""
        return "tool_choice" in body

    def refuse(self, body: dict) -> Optional[int]:
        """A status to answer a request the server itself rejects (not a scripted fault), or None."""
        return None

    def get(self, path: str) -> tuple[int, dict]:
        """A GET (a model list): (status, JSON body)."""
        return 404, {"error": {"message": f"no route {path}"}}

    # ------------------------------------------------------------------ one request
    def _take(self, asked: Asked) -> Optional[Fault]:
        with self._lock:
            for i, fault in enumerate(self.faults):
                if fault.matches(asked):
                    return self.faults.pop(i)
        return None

    def serve(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        asked = self.read(handler.path, body)
        refused = self.refuse(body)
        fault = None if refused else self._take(asked)
        status = refused or (fault.status if fault else 200)
        with self._lock:
            self.requests.append(body)
            # a late answer is scripted as a timeout: the client never sees its status
            self.statuses.append(None if fault and fault.delay_s else status)
        if fault and fault.delay_s:
            time.sleep(fault.delay_s)
        if status == 200:
            out = self.reply(body, asked, offline_answer(self.model, asked), fault)
        else:
            out = self.error_body(status)
        if isinstance(out, list):
            data, kind = b"".join(json.dumps(o).encode() + b"\n" for o in out), "application/x-ndjson"
        else:
            data, kind = json.dumps(out).encode(), "application/json"
        try:
            handler.send_response(status)
            for k, v in (fault.headers if fault else {}).items():
                handler.send_header(k, v)
            handler.send_header("Content-Type", kind)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): that is the fault being tested


def usage_of(answer: AIMessage) -> dict:
    return dict(answer.usage_metadata or {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
