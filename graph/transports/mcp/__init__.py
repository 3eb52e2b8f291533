"""The MCP transport: every kernel capability as a tool of the official SDK's server (server.py); `python -m
graph.transports.mcp` starts it on its own (__main__.py)."""

from graph.transports.mcp.server import TRANSPORT, create_server, input_schema, run_http, run_stdio, tool_for

__all__ = ["TRANSPORT", "create_server", "input_schema", "run_http", "run_stdio", "tool_for"]
