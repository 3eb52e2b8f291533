"""Shared fixtures: an embedded nx-27017 server per test session, a Store per backend, a tmp TRADEGRAPH_HOME."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from database import Store, connect
from database.embedded import start_server, stop_server
from graph.transports.gc_tuning import collect_garbage_less_often

# a worker collects garbage as the CLI does (graph/transports/gc_tuning.py): with Python's default the unit tests
# spent 8 % of their CPU in the cyclic collector, with this under 3 % (146 s -> 131 s of CPU in all, measured)
collect_garbage_less_often()

if TYPE_CHECKING:
    from tests.helpers import Answer

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
            home = tmp_path_factory.mktemp("tradegraph_home")
            mp.setenv("TRADEGRAPH_HOME", str(home))
            derived = _derived_in_background()
            if derived is not None:
                _seed_stockbench(home, derived)
        yield


# The shipped StockBench tree's derived cache (agent/data/stockbench/: ~6.5 s of CPU to derive, ~0.3 s to read), made
# once per run under xdist (`make test`): the controller starts it in the background at configure, and each worker's
# session home is seeded with it, as is each fresh home a test asks for (`stockbench_home`). Run without xdist, a test
# that asks for it makes it. The cold load, and what a cache changes, are tested in tests/unit/test_stockbench_data.py.
_DERIVED_ENV = "TG_TEST_STOCKBENCH_DERIVED"  # not TRADEGRAPH_-prefixed: the scrub above keeps it for the workers
_DERIVE = """import sys, traceback
from pathlib import Path
try:
    from agent.data.stockbench import load_tree
    load_tree()
    Path(sys.argv[1], "done").write_text("ok")
except BaseException:
    Path(sys.argv[1], "failed").write_text(traceback.format_exc())
    raise
"""


def _derive(root: Path) -> subprocess.Popen:
    """Derive the shipped tree into root/home's cache, in a process of its own (no caller's loaded trees change)."""
    (root / "home").mkdir(parents=True)
    return subprocess.Popen(
        [sys.executable, "-c", _DERIVE, str(root)],
        env={**os.environ, "TRADEGRAPH_HOME": str(root / "home")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _derived_file(root: Path, timeout_s: float = 300) -> Path:
    deadline = time.monotonic() + timeout_s
    while not (root / "done").exists():
        if (root / "failed").exists():
            raise RuntimeError(f"deriving the shipped StockBench tree failed:\n{(root / 'failed').read_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"deriving the shipped StockBench tree took over {timeout_s} s ({root})")
        time.sleep(0.1)
    (made,) = _cache_of(root / "home").glob("*.json")
    return made


def _derived_in_background() -> Path | None:
    root = os.environ.get(_DERIVED_ENV)
    return _derived_file(Path(root)) if root else None


def _cache_of(home: Path) -> Path:
    """Where a process with TRADEGRAPH_HOME=home keeps the derived tree (agent/data/stockbench/ cache_dir)."""
    return home / "cache" / "stockbench"


def _seed_stockbench(home: Path, derived: Path) -> None:
    _cache_of(home).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(derived, _cache_of(home) / derived.name)


_DERIVING = pytest.StashKey[tuple[Path, subprocess.Popen]]()  # the controller's derivation: its folder and process


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker, or a run without xdist
    root = Path(tempfile.mkdtemp(prefix="tg-stockbench-"))
    os.environ[_DERIVED_ENV] = str(root)  # the workers, started after this, inherit it
    config.stash[_DERIVING] = (root, _derive(root))


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(_DERIVING, None)
    if started is not None:
        root, proc = started
        proc.kill()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)
        os.environ.pop(_DERIVED_ENV, None)


def pytest_collection_finish(session: pytest.Session) -> None:
    # what collection imported and built lives until the worker exits: a full collection need not walk it again
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)  # first: other plugins see the groups and the nodeids they give (_suffix_groups)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`@pytest.mark.requires("ray")`: skipped, naming the extra, where an optional extra is not installed (`make
    test` installs them all, so there every such test runs). Under xdist's loadgroup (`make test`), the groups
    below keep what is made once on one worker."""
    import importlib.util

    extras = {"ray": "sweep"}
    ray: set[str] = set()  # modules with a Ray test
    for item in items:
        for mark in item.iter_markers("requires"):
            module = mark.args[0]
            if importlib.util.find_spec(module) is None:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"{module} is not installed: pip install -e "
                        f"'.[{extras.get(module, module)}]' (make test installs it)"
                    )
                )
            elif module == "ray":
                ray.add(item.nodeid.split("::")[0])
    for item in items:
        group = _xdist_group(item, ray)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    config = items[0].config if items else None
    _suffix_groups(config, items)
    _spread(config, items)


def _spread(config: pytest.Config | None, items: list[pytest.Item]) -> None:
    """Under loadgroup (`make test`), the tests of no group run in an order spread by a hash of their id instead of
    file by file. File by file, the workers reached the tests that mostly wait (a 429's Retry-After, a model timeout,
    a collector that hangs, a server's start) together, and the machine idled at ~40 % for a minute (vmstat);
    spread, their waits overlap other tests' work. Grouped tests keep their order (a module's fixture is made once
    only while its tests run in a row). Deterministic: every worker must collect the same order."""
    import hashlib

    if config is None or not getattr(config.option, "loadgroup", False):
        return

    def key(item: pytest.Item) -> tuple[int, str]:  # grouped: one key, so the stable sort keeps their order
        grouped = item.get_closest_marker("xdist_group") is not None
        return (0, "") if grouped else (1, hashlib.sha1(item.nodeid.encode()).hexdigest())

    items.sort(key=key)


def _suffix_groups(config: pytest.Config | None, items: list[pytest.Item]) -> None:
    """What xdist's loadgroup does to an item of a group (its nodeid ends `@group`, and the scheduler sends all of a
    group to one worker), done so it works on pytest 9: xdist 3.8 sets `item._nodeid`, which pytest 9's nodeid
    (read from `item._id`) no longer reads, so every xdist_group mark was ignored (the Ray tests ran on both
    workers at once, thrashing into their timeouts)."""
    from _pytest.nodeid import NodeId

    if config is None or not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        nodeid = item.nodeid
        if names and nodeid.rfind("@") <= nodeid.rfind("]"):
            item._id = NodeId.parse(f"{nodeid}@{'_'.join(names)}")


def _xdist_group(item: pytest.Item, ray_modules: set[str]) -> str | None:
    """- "ray": one worker runs every Ray test, each starting a local Ray instance with a worker per CPU (two at once
    on a 2-core machine only thrash), and with it every test of a module that shares a module fixture with one;
    - the module's path: tests sharing a module-scoped fixture (a server, a reference run, recorded cycles) run on one
      worker, which makes it once (xdist's load spreads a module over both workers, and each made it)."""
    module = item.nodeid.split("::")[0]
    ray = any(m.args[0] == "ray" for m in item.iter_markers("requires"))
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    shared = any(fixturedefs and fixturedefs[-1].scope == "module" for fixturedefs in defs.values())
    if ray or (shared and module in ray_modules):
        return "ray"
    return module if shared else None


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


@pytest.fixture(scope="session")
def stockbench_derived(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped StockBench tree's derived cache file: the run's own under xdist, else made here."""
    made = _derived_in_background()
    if made is None:
        root = tmp_path_factory.mktemp("stockbench_derived")
        _derive(root.joinpath("run")).wait()
        made = _derived_file(root / "run")
    return made


@pytest.fixture
def stockbench_home(tmp_path: Path, stockbench_derived: Path) -> Path:
    """A fresh TRADEGRAPH_HOME (not set: pass it to the process) holding the shipped tree's derived cache."""
    home = tmp_path / "home"
    _seed_stockbench(home, stockbench_derived)
    return home


@pytest.fixture
def tg_home(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """TRADEGRAPH_HOME pointed at a tmp dir and MONGODB_URI unset, so connect() goes embedded there."""
    home = tmp_path / "tg_home"
    monkeypatch.setenv("TRADEGRAPH_HOME", str(home))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    return home


@pytest.fixture
def openai_server(monkeypatch: pytest.MonkeyPatch):
    """A local OpenAI-compatible fake (tests/fakes/fake_openai.py) that the default services talk to: its
    `requests` are what a provider would have been sent (the environment is already clean of tradegraph's
    variables, see _clean_environment)."""
    from tests.fakes.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


@pytest.fixture
def tradegraph(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Answer]:
    """tradegraph(*argv, **env): the CLI's main(argv) in this process with env set, its exit code and what it
    printed (tests/helpers.py cli_here). For a step whose own process is not what a test checks (a read-back, a
    refusal): a process of its own costs ~3 s of imports here. Steps that must be another process (a second writer,
    a kill, a fresh cache) keep their subprocess."""
    from tests.helpers import cli_here

    monkeypatch.setenv("TRADEGRAPH_LLM", "offline")
    return lambda *argv, **env: cli_here(list(argv), env)
