"""MCP transport: one tool per capability on the official SDK's MCPServer (mcp 2.x; FastMCP in 1.x).

Each tool's input schema is the capability's input model's JSON Schema and its output schema the output
model's (structured output), so MCP, HTTP and Python share one definition. Arguments are validated by the
kernel, not the SDK, so a bad argument comes back as the same one-line error every transport gives:
`bad_input: as_of: String should match pattern … (got '2012-6-1')`.

    python -m graph.transports.mcp                 # stdio (Claude Desktop, IDEs)
    python -m graph.transports.mcp --http 8765     # streamable HTTP on 127.0.0.1:8765/mcp
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Optional

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, TypeAdapter

from graph.kernel.capabilities import Capability
from graph.kernel.core import Kernel
from graph.kernel.errors import KernelError
from graph.kernel.models import IDEMPOTENCY_KEY_HELP, IdempotencyKey

TRANSPORT = "mcp"
IDEMPOTENCY_ARG = "idempotency_key"  # not a field of the input model: the kernel takes it beside the input
INSTRUCTIONS = (
    "tradegraph runs audited LLM trading cycles (SCANNING → … → MEMORIZING) and reads their audit "
    "log. Session ids are the same as the CLI's and the HTTP API's. Cycles that would execute pause "
    "before EXECUTING unless the server allows execution over MCP."
)


class _Arguments(ArgModelBase):
    """Hands the raw arguments through: the kernel validates them against the capability's model."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _unquote(cap: Capability, args: dict[str, Any]) -> dict[str, Any]:
    """Some clients (Claude Desktop) send a list or object as a JSON string; the SDK's own tools parse it too."""
    out = dict(args)
    for key, value in args.items():
        field = cap.input_model.model_fields.get(key)
        if field is not None and isinstance(value, str) and field.annotation is not str and value[:1] in "[{":
            try:
                out[key] = json.loads(value)
            except ValueError:
                pass
    return out


def input_schema(cap: Capability) -> dict[str, Any]:
    """The capability's input model's JSON Schema; one that starts something also takes `idempotency_key`."""
    schema = cap.input_model.model_json_schema()
    if cap.keyed:
        key = {
            **TypeAdapter(IdempotencyKey).json_schema(),
            "title": "Idempotency Key",
            "description": IDEMPOTENCY_KEY_HELP,
        }
        schema = {**schema, "properties": {**schema.get("properties", {}), IDEMPOTENCY_ARG: key}}
    return schema


def tool_for(kernel: Kernel, cap: Capability) -> Tool:
    def run(arguments: dict[str, Any]) -> Any:
        arguments = dict(arguments)
        key = arguments.pop(IDEMPOTENCY_ARG, None) if cap.keyed else None
        try:
            return kernel.call_keyed(cap.name, _unquote(cap, arguments), transport=TRANSPORT, idempotency_key=key)
        except KernelError as e:
            return CallToolResult(content=[TextContent(type="text", text=f"{e.kind}: {e.message}")], is_error=True)

    moves = " Moves the book: off over MCP unless TRADEGRAPH_ALLOW_EXECUTION includes mcp." if cap.moves_book else ""
    if cap.deletes:
        moves = (
            " Deletes stored sessions: off over MCP unless TRADEGRAPH_ALLOW_DELETE includes mcp (a dry run is allowed)."
        )
    return Tool(
        fn=run,
        name=cap.name,
        title=cap.name.replace("_", " "),
        description=cap.description + moves,
        parameters=input_schema(cap),
        fn_metadata=FuncMetadata(arg_model=_Arguments, output_model=cap.output_model),
        is_async=False,
        context_kwarg=None,
        annotations=ToolAnnotations(destructive_hint=cap.moves_book or cap.deletes, open_world_hint=False),
    )


def create_server(kernel: Kernel) -> MCPServer:
    tools = [tool_for(kernel, cap) for cap in kernel.capabilities().values()]
    server = MCPServer(name="tradegraph", instructions=INSTRUCTIONS, version="0.1.0", tools=tools, log_level="WARNING")
    quiet_root_handlers()
    return server


def quiet_root_handlers() -> None:
    """The SDK puts a handler on the root logger that lets through whatever a library's own logger passes on, and
    bm25s sets its logger to DEBUG ("Building index from tokens" on every memory index build): on stderr, the
    stdio server's only channel besides the protocol. Below WARNING nothing is shown unless TRADEGRAPH_DEBUG."""
    if not os.environ.get("TRADEGRAPH_DEBUG"):
        for handler in logging.getLogger().handlers:
            handler.setLevel(logging.WARNING)


def run_stdio(db: Optional[str] = None) -> None:
    from graph.transports.http import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()
    kernel = Kernel.open(db)
    try:
        create_server(kernel).run("stdio")
    finally:
        kernel.close()


def run_http(port: int, host: str = "127.0.0.1", db: Optional[str] = None) -> None:
    """Streamable HTTP at http://host:port/mcp, under the same bind, token, Host and Origin policy as the HTTP API."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from graph.kernel.policy import Policy, check_bind
    from graph.transports.http import SHUTDOWN_GRACE_S, BearerAuth, exit_cleanly_on_sigterm
    from graph.transports.web_guard import guarded

    policy = Policy.for_transport(TRANSPORT)
    check_bind(host, policy)
    exit_cleanly_on_sigterm()
    kernel = Kernel.open(db)
    try:
        # the SDK's own Host/Origin check (loopback binds only, any local port's origin) gives way to the guard
        # `serve` uses, so both servers answer to the same names and refuse the same origins
        app = create_server(kernel).streamable_http_app(
            host=host, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        served = guarded(BearerAuth(app, policy) if policy.token else app, host)
        uvicorn.run(served, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    finally:
        kernel.close()
