"""Shared fixtures: an embedded nx-27017 server per test session, a Store per backend, a tmp TRADEGRAPH_HOME."""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from database import Store, connect
from database.embedded import start_server, stop_server


# what a developer's shell may set that would change what a test runs against: a live OTLP collector, a real
# provider, a tradegraph.toml elsewhere, a tuned limit. TRADEGRAPH_HOME stays (where the embedded store lives).
_SCRUBBED_PREFIXES = ("OTEL_", "TRADEGRAPH_", "OPENAI_", "ANTHROPIC_", "GOOGLE_API_KEY", "OLLAMA_", "ALPACA_")


@pytest.fixture(autouse=True, scope="session")
def _clean_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # session scope: it must run before any module-scoped fixture that already runs a cycle
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(_SCRUBBED_PREFIXES) and name != "TRADEGRAPH_HOME":
                mp.delenv(name)
        if not os.environ.get("TRADEGRAPH_HOME"):
            # unset, the store would be a project's .tradegraph found upward or the user's own data directory
            # (database/embedded.py resolve_home): never a test's
            mp.setenv("TRADEGRAPH_HOME", str(tmp_path_factory.mktemp("tradegraph_home")))
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`@pytest.mark.requires("ray")`: skipped, naming the extra, where an optional extra is not installed (`make
    test` installs them all, so there every such test runs)."""
    import importlib.util

    extras = {"ray": "sweep"}
    for item in items:
        for mark in item.iter_markers("requires"):
            module = mark.args[0]
            if importlib.util.find_spec(module) is None:
                item.add_marker(pytest.mark.skip(reason=f"{module} is not installed: pip install -e "
                                                        f"'.[{extras.get(module, module)}]' (make test installs it)"))
            elif module == "ray":
                # under xdist (`make test`), one worker runs every Ray test: each starts a local Ray instance with a
                # worker per CPU, and two at once on a 2-core machine only thrash
                item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def embedded_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """mongodb:// URI (no database) of ONE nx-27017 server shared by the whole test session."""
    home = tmp_path_factory.mktemp("nx-27017")
    port, _pid = start_server(home)
    try:
        yield f"mongodb://127.0.0.1:{port}"
    finally:
        stop_server(home)


@pytest.fixture(params=["mongomock", pytest.param("embedded", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A fresh Store on a database of its own, on each backend."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    if request.param == "mongomock":
        uri = f"mongomock://{name}"
    else:
        # looked up lazily so `-m "not integration"` never starts a server
        uri = f"{request.getfixturevalue('embedded_uri')}/{name}"
    s = connect(uri)
    try:
        yield s
    finally:
        s.client.drop_database(name)
        s.close()


@pytest.fixture
def tg_home(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """TRADEGRAPH_HOME pointed at a tmp dir and MONGODB_URI unset, so connect() goes embedded there."""
    home = tmp_path / "tg_home"
    monkeypatch.setenv("TRADEGRAPH_HOME", str(home))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    return home


@pytest.fixture
def openai_server(monkeypatch: pytest.MonkeyPatch):
    """A local OpenAI-compatible fake (tests/fakes/fake_openai.py) that the default runtime talks to: its
    `requests` are what a provider would have been sent (the environment is already clean of tradegraph's
    variables, see _clean_environment)."""
    from tests.fakes.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server
