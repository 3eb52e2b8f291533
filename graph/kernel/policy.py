"""What each transport may do, decided in the kernel so no transport can forget it.

- A network server binds to loopback unless `TRADEGRAPH_API_TOKEN` is set; with a token set every request
  must carry `Authorization: Bearer <token>` (401 otherwise), on loopback too.
- Capabilities that move the book (a cycle that may execute, approve) are on in-process and on the CLI,
  and off over HTTP and MCP unless `TRADEGRAPH_ALLOW_EXECUTION` lists the transport (`http`, `mcp`, or
  `http,mcp`). Off, a cycle still runs, pauses before EXECUTING (checkpointed, as with --approve) and
  says why; approve is refused naming the setting.
- Deleting sessions (delete_session, prune_sessions; a dry run changes nothing and is allowed everywhere) follows
  the same rule under its own setting, `TRADEGRAPH_ALLOW_DELETE` (`http`, `mcp`, or `http,mcp`): allowing remote
  trading does not allow remote deletion of the audit trail.
- A caller's own data files (prices, news, fundamentals) are paths on the server's disk: any path in-process and
  on the CLI; over HTTP and MCP only inside a folder `TRADEGRAPH_DATA_DIRS` lists (os.pathsep-separated), since a
  parse error quotes the file (a header line is enough to leak /proc/self/environ).
- A network server answers only to its own names (DNS rebinding: a page on a name that resolves to 127.0.0.1
  would otherwise talk to it with the browser's blessing): a `Host` that is an IP address, `localhost`, the bind
  address, or a name `TRADEGRAPH_ALLOWED_HOSTS` lists (comma-separated); any other is answered 421. Its own origin
  is `http(s)://` + that `Host`: a state-changing request from any other origin is refused (403).
  graph/transports/web_guard.py applies both, to the HTTP API and to MCP over HTTP alike.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

TRANSPORTS = ("local", "cli", "http", "mcp")
# trusted: the caller already runs code as this user on this machine
ALWAYS_EXECUTES = ("local", "cli")
EXECUTION_ENV = "TRADEGRAPH_ALLOW_EXECUTION"
DELETE_ENV = "TRADEGRAPH_ALLOW_DELETE"
TOKEN_ENV = "TRADEGRAPH_API_TOKEN"
DATA_DIRS_ENV = "TRADEGRAPH_DATA_DIRS"
ALLOWED_HOSTS_ENV = "TRADEGRAPH_ALLOWED_HOSTS"
# the names a loopback server answers to besides IP addresses: an IP literal cannot be rebound, a name can
LOOPBACK_NAMES = ("localhost",)
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")


class PolicyError(ValueError):
    """A server configuration the policy refuses; the message is one line naming the setting."""


@dataclass(frozen=True)
class Policy:
    transport: str
    allow_execution: bool
    token: Optional[str] = None
    data_dirs: tuple[Path, ...] = ()
    allow_delete: bool = False

    @classmethod
    def for_transport(cls, transport: str, env: Optional[Mapping[str, str]] = None) -> Policy:
        env = os.environ if env is None else env
        if transport not in TRANSPORTS:
            raise PolicyError(f"unknown transport {transport!r} (known: {', '.join(TRANSPORTS)})")
        return cls(
            transport,
            transport in ALWAYS_EXECUTES or transport in allowed_transports(env),
            (env.get(TOKEN_ENV) or "").strip() or None,
            data_dirs(env),
            transport in ALWAYS_EXECUTES or transport in deleting_transports(env),
        )

    def data_refusal(self, path: str) -> Optional[str]:
        """None when this transport may have the kernel read the file at `path`, else the line saying how to allow it."""
        if self.transport in ALWAYS_EXECUTES:
            return None
        try:  # symlinks resolved: a link inside an allowed folder to a file outside is outside
            resolved = Path(path).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            resolved = None
        if resolved is not None and any(resolved.is_relative_to(d) for d in self.data_dirs):
            return None
        return (
            f"reading {path} is refused over {self.transport}: list its folder in {DATA_DIRS_ENV} on the server "
            f"to allow it"
        )

    def execution_refusal(self) -> Optional[str]:
        """None when this transport may move the book, else the one line saying how to allow it."""
        if self.allow_execution:
            return None
        return (
            f"execution is disabled over {self.transport}: set {EXECUTION_ENV}={self.transport} on the "
            f"server to allow it"
        )

    def deletion_refusal(self) -> Optional[str]:
        """None when this transport may delete sessions, else the one line saying how to allow it."""
        if self.allow_delete:
            return None
        return (
            f"deleting sessions is disabled over {self.transport}: set {DELETE_ENV}={self.transport} on the "
            f"server to allow it (a dry run is allowed)"
        )

    def authorized(self, header: Optional[str]) -> bool:
        if self.token is None:
            return True
        scheme, _, value = (header or "").partition(" ")
        # constant time: a wrong token must not be guessable byte by byte from response times
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())


def allowed_transports(env: Mapping[str, str], var: str = EXECUTION_ENV) -> set[str]:
    raw = env.get(var, "")
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = names - {"http", "mcp"}
    if unknown:
        raise PolicyError(
            f"{var}={raw!r}: unknown transport(s) {', '.join(sorted(unknown))} (use http, mcp or http,mcp)"
        )
    return names


def deleting_transports(env: Mapping[str, str]) -> set[str]:
    return allowed_transports(env, DELETE_ENV)


def data_dirs(env: Mapping[str, str]) -> tuple[Path, ...]:
    """The folders network callers' data files may be in; an entry that is not an existing folder is refused
    rather than allowing nothing without a word."""
    raw = env.get(DATA_DIRS_ENV, "")
    dirs = []
    for entry in (e.strip() for e in raw.split(os.pathsep)):
        if not entry:
            continue
        try:
            folder = Path(entry).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            folder = None
        if folder is None or not folder.is_dir():
            raise PolicyError(f"{DATA_DIRS_ENV}={raw!r}: {entry!r} is not a folder")
        dirs.append(folder)
    return tuple(dirs)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname other than localhost may resolve anywhere


def check_bind(host: str, policy: Policy) -> None:
    """Refuse to serve beyond this machine without a token."""
    if not is_loopback(host) and policy.token is None:
        raise PolicyError(
            f"refusing to bind {host}: a non-loopback address needs {TOKEN_ENV} set "
            f"(clients then send 'Authorization: Bearer <token>'); or bind 127.0.0.1"
        )


def allowed_host_names(env: Mapping[str, str]) -> frozenset[str]:
    """The host names TRADEGRAPH_ALLOWED_HOSTS adds (lower case); an entry that is not a plain host name (a port, a
    scheme, a wildcard) is refused rather than matching nothing without a word."""
    raw = env.get(ALLOWED_HOSTS_ENV, "")
    names = set()
    for entry in (e.strip().lower().rstrip(".") for e in raw.split(",")):
        if not entry:
            continue
        if not _HOST_NAME.match(entry):
            raise PolicyError(
                f"{ALLOWED_HOSTS_ENV}={raw!r}: {entry!r} is not a host name (list names only, "
                f"comma-separated: no scheme, port or wildcard)"
            )
        names.add(entry)
    return frozenset(names)


@dataclass(frozen=True)
class HostPolicy:
    """Which `Host` a network server answers to: the one definition both servers use (web_guard.py)."""

    names: frozenset[str]

    @classmethod
    def for_bind(cls, bind_host: str, env: Optional[Mapping[str, str]] = None) -> HostPolicy:
        env = os.environ if env is None else env
        bound = bind_host.strip("[]").lower()
        # `serve --host myhost.lan` answers to that name (an address is allowed anyway)
        own = {bound} if _HOST_NAME.match(bound) and not _is_address(bound) else set()
        return cls(frozenset({*LOOPBACK_NAMES, *own, *allowed_host_names(env)}))

    def allows(self, host_header: Optional[str]) -> bool:
        """A request's `Host` (name or address, with or without a port) is one this server answers to."""
        name = host_name(host_header)
        return bool(name) and (_is_address(name) or name in self.names)  # an address is never a rebound name


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def host_name(host_header: Optional[str]) -> str:
    """The name or address of a `Host` header, without its port or an IPv6 address's brackets, lower case."""
    host = (host_header or "").strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    return (host.rsplit(":", 1)[0] if host.count(":") == 1 else host).rstrip(".")
