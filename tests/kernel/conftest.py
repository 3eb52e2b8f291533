"""Servers the kernel's transport tests share: one `tradegraph serve` with execution allowed over HTTP, on a database
of its own, started once per test session (per xdist worker) for every module that needs no server of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kernel.servers import free_port, serve, server_env


@dataclass(frozen=True)
class Served:
    db_uri: str  # the database the server writes (tests read it directly)
    workdir: Path  # its working directory; its home is workdir / "home"
    url: str


@pytest.fixture(scope="session")
def executing_server(embedded_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`tradegraph serve` with TRADEGRAPH_ALLOW_EXECUTION=http: cycles over HTTP run to EXECUTING. Each test makes
    sessions of its own, so sharing it is invisible to them."""
    db_uri = f"{embedded_uri}/kexec_{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("kernel-exec")
    port = free_port()
    env = server_env(db_uri, workdir / "home", TRADEGRAPH_ALLOW_EXECUTION="http")
    with serve(["serve", "--port", str(port)], env, workdir, f"http://127.0.0.1:{port}/store"):
        yield Served(db_uri, workdir, f"http://127.0.0.1:{port}")
