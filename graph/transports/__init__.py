"""Thin adapters over the kernel: HTTP (FastAPI), MCP (the official SDK) and the CLI entry points. The
Python client is graph/transports/client.py."""
