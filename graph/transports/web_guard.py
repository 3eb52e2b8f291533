"""What a browser may make a local server do: the guard in front of `tradegraph serve` and `mcp --http`.

A browser lets any page send requests to 127.0.0.1, and a page on a name that resolves there (DNS rebinding) even
reads the answers. Two checks, in this order, on every request before anything else runs (the token too):
- `Host` must be one this server answers to (graph/kernel/policy.py HostPolicy: an IP address, localhost, the bind
  name, TRADEGRAPH_ALLOWED_HOSTS), else 421 Misdirected Request.
- A state-changing request (POST, PUT, PATCH, DELETE) must come from the server's own origin: an `Origin` header
  other than `http(s)://<Host>` (`null` included), or without one a `Sec-Fetch-Site` of `cross-site` or
  `same-site`, is refused 403. Programs (the Python client, MCP clients, curl) send neither header and pass.
Reads (GET) are not origin-checked: a cross-origin page cannot read the answer, and a rebound one fails the Host.

A browser page served by this app itself (its Origin is http://<Host>) passes; anything mounted on the app is behind
the same guard, so it needs no check of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import urlsplit

from graph.kernel.policy import HostPolicy, host_name

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def _port(netloc_port: Optional[int], scheme: str) -> Optional[int]:
    return netloc_port if netloc_port is not None else DEFAULT_PORTS.get(scheme)


def is_own_origin(origin: str, host_header: str, scheme: str = "http") -> bool:
    """`origin` names this server as the request reached it: http or https, the `Host`'s name and port (a missing
    port is the scheme's default)."""
    try:
        o = urlsplit(origin)
        o_port = o.port
        h = urlsplit(f"//{host_header}")
        h_port = h.port
    except ValueError:  # a port out of range or not a number
        return False
    if o.scheme not in DEFAULT_PORTS or o.path not in ("", "/") or o.query or o.fragment or o.username:
        return False
    return host_name(o.netloc) == host_name(host_header) != "" and _port(o_port, o.scheme) == _port(h_port, scheme)


def refusal(
    method: str, headers: Mapping[str, str], hosts: HostPolicy, scheme: str = "http"
) -> Optional[tuple[int, str, str]]:
    """(status, field, one line) when the request is refused, else None. `headers` keys in lower case."""
    host = headers.get("host", "")
    if not hosts.allows(host):
        return (
            421,
            "Host",
            f"Host {host!r} is not a name this server answers to (an IP address, "
            f"{', '.join(sorted(hosts.names))}; add one with TRADEGRAPH_ALLOWED_HOSTS)",
        )
    if method.upper() not in STATE_CHANGING:
        return None
    origin = headers.get("origin")
    if origin is not None:
        if is_own_origin(origin, host, scheme):
            return None
        return (
            403,
            "Origin",
            f"cross-origin {method.upper()} refused: Origin {origin!r} is not this server's own ({scheme}://{host})",
        )
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site in ("cross-site", "same-site"):
        return (
            403,
            "Sec-Fetch-Site",
            f"cross-origin {method.upper()} refused: Sec-Fetch-Site is {site!r} and no Origin names this server",
        )
    return None


class SameOriginGuard:
    """Pure ASGI around the whole app (OpenAPI, SSE, MCP and whatever is mounted later included)."""

    def __init__(self, app: Any, hosts: HostPolicy):
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
            method = scope.get("method", "GET") if scope["type"] == "http" else "GET"
            scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
            refused = refusal(method, headers, self.hosts, scheme)
            if refused is not None:
                status, field, line = refused
                kind = "misdirected_request" if status == 421 else "forbidden"
                body = json.dumps({"error": kind, "message": line, "field": field}).encode()
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def guarded(app: Any, bind_host: str, env: Optional[Mapping[str, str]] = None) -> Any:
    """`app` behind the guard, answering to the names HostPolicy gives for this bind address."""
    return SameOriginGuard(app, HostPolicy.for_bind(bind_host, env))
