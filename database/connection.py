"""connect(): one entry point for a real MongoDB, the embedded nx-27017 server, or mongomock."""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from database import embedded
from database.admin_log import AdminLog
from database.errors import StoreUnavailable
from database.llm_cache import LlmCacheStore
from database.memories import MemoryStore
from database.portfolio import ExecutionLedger, PortfolioStore
from database.running import RunningCycles
from database.sessions import FoldingWriter, SessionSummaries, SummarisedEvents
from database.spool import RecoveryReport, pending_files, recover
from database.writer import BufferedEventWriter

DEFAULT_DB = "tradegraph"
# the longest Store.close() waits for a server to end its sessions on
CLOSE_TIMEOUT_S = 0.5
SCHEMES = ("mongodb://", "mongodb+srv://", "mongomock://")

# mongomock clients shared per URI, so two connect() calls see the same data like a server would
_mock_clients: dict[str, tuple[Any, threading.Lock]] = {}
_mock_guard = threading.Lock()


def redact(uri: str) -> str:
    """mongodb://user:secret@host -> mongodb://user:***@host"""
    return re.sub(r"^([a-z0-9+.-]+://[^:/@]+):[^@/]*@", r"\1:***@", uri, flags=re.I)


def check_store_uri(uri: str, named: str) -> None:
    """A URI connect() can't use is bad input, named as the user gave it (`named`), its password hidden."""
    if not uri.startswith(SCHEMES):
        raise ValueError(f"{named} is not a store URI: expected {', '.join(SCHEMES)}")
    if uri.startswith("mongomock://"):
        return
    from pymongo.errors import PyMongoError
    from pymongo.uri_parser import parse_uri

    # the hosts, ports and options pymongo would refuse when connecting (mongodb://:::/ reads as a store outage
    # there, exit 3), and an option it does not know (a typo it would only warn about); an SRV name is parsed as a
    # plain host without its options, since resolving it would ask DNS at start-up
    scheme, rest = uri.split("://", 1)
    try:
        parse_uri("mongodb://" + (rest.split("?", 1)[0] if scheme == "mongodb+srv" else rest), warn=False)
    except (ValueError, PyMongoError) as e:
        raise ValueError(
            f"{named} is not a valid store URI: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None


def check_store_uri_env(env) -> None:
    """MONGODB_URI at start-up (agent/config.py check_environment)."""
    uri = env.get("MONGODB_URI")
    if uri:
        check_store_uri(uri, f"MONGODB_URI={redact(uri)!r}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    # pymongo's timeout messages append a long topology description after a comma-separated list
    msg = (text[0] if text else type(exc).__name__).split(", Timeout:")[0]
    return f"{type(exc).__name__}: {msg[:300]}"


@dataclass
class Store:
    uri: str
    client: Any
    db: Any
    events: SummarisedEvents
    portfolios: PortfolioStore
    executions: ExecutionLedger
    memories: MemoryStore
    # set when this Store started the embedded server and must stop it on close
    owned_server_home: Path | None = field(default=None, repr=False)
    # where audit events that this store could not take wait for redelivery (under the home resolve_home finds,
    # whatever the store: a MONGODB_URI store's too), and the name they wait under
    spool_dir: Path = field(default_factory=lambda: embedded.default_home() / "spool", repr=False)
    target: str = ""
    _closed: bool = field(default=False, repr=False)
    # an embedded store's home (None otherwise): its server may come back on another port, see reconnect()
    embedded_home: Path | None = field(default=None, repr=False)
    # why that home (TRADEGRAPH_HOME, a project's .tradegraph, the per-user default): what `location` says
    home: embedded.Home | None = field(default=None, repr=False)
    # how many times reconnect() has moved this store to a new client, and how long it waits for the server
    generation: int = field(default=0, repr=False)
    timeout_s: float = field(default=5.0, repr=False)
    _reconnecting: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def sessions(self) -> SessionSummaries:
        """Per-session summaries, what listing reads instead of the log (database/sessions.py)."""
        return SessionSummaries(self.db, self.events)

    @property
    def admin_log(self) -> AdminLog:
        """Every deletion of a session (database/admin_log.py)."""
        return AdminLog(self.db)

    @property
    def running(self) -> RunningCycles:
        """Cycles in flight, each under a lease a deletion fences (database/running.py)."""
        return RunningCycles(self.db)

    @property
    def location(self) -> str:
        """Where this store is, in words (a session not found here names it): an embedded store's folder and why
        that folder, else the URI with its password hidden."""
        if self.home is not None:
            return self.home.describe()
        return str(self.embedded_home) if self.embedded_home is not None else redact(self.uri)

    @property
    def llm_cache(self) -> LlmCacheStore:
        """Provider answers by request hash (agent/cache.py); keyed by `_id`, so it needs no index of its own."""
        return LlmCacheStore(self.db)

    def writer(self, **options: Any) -> BufferedEventWriter:
        """A buffered audit writer that spools to local disk if this store stops taking events, and folds the
        sessions it wrote into their summaries when it closes."""
        return FoldingWriter(self.sessions, self.events, spool_dir=self.spool_dir, target=self.target, **options)

    def recover_spool(self) -> RecoveryReport:
        """Redeliver spooled events meant for this store (idempotent by event_id)."""
        return recover(self.events, self.spool_dir, self.target)

    def ensure_indexes(self) -> None:
        self.events.ensure_indexes()
        self.portfolios.ensure_indexes()
        self.executions.ensure_indexes()
        self.memories.ensure_indexes()
        self.sessions.ensure_indexes()
        self.admin_log.ensure_indexes()
        self.running.ensure_indexes()

    def moved(self) -> bool:
        """An embedded store whose server is no longer the one this client talks to: stopped (`store stop`), or
        started again on another port (`store stop` + `store start`, a killed server restarted). One small file
        read, no network: cheap enough to ask before every request."""
        if self.embedded_home is None or self._closed:
            return False
        port = embedded.recorded_port(self.embedded_home)
        return port is not None and port != _port_of(self.uri)

    def reconnect(self, seen: int) -> bool:
        """Point an embedded store at its server again, as connect() found it (running under the same home, on
        whatever port it now has, else started): a fresh client, and everything built on it, swapped in here so
        that every holder of this Store (the kernel, its task manager) uses it from now on; the old client is
        closed. `seen` is the generation the caller found broken: a reconnect another thread did meanwhile is
        not done twice. False when nothing needed doing: the server this client talks to still answers, or the
        store's address can't move (a mongodb:// URI: pymongo reconnects to it by itself). Raises
        StoreUnavailable while no server answers."""
        if self.embedded_home is None or self._closed:
            return False
        with self._reconnecting:
            if self.generation != seen:
                return True
            port = _port_of(self.uri)
            if not self.moved() and port and embedded.answers(port):
                return False  # the server this client talks to is there: a new client would change nothing
            fresh = _connect_embedded(self.embedded_home, self.timeout_s)  # redelivers its spool, as any connect
            fresh.events.seen = self.events.seen  # what was appended and not folded yet is folded on the new client
            old = self.client
            # owned only if no server was running and this one started it: then it stops it on close
            for name in ("uri", "client", "db", "events", "portfolios", "executions", "memories", "owned_server_home"):
                setattr(self, name, getattr(fresh, name))
            self.generation += 1
        old.close()
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.sessions.fold_all()  # what this process appended and did not fold yet (never raises)
        # a shared mongomock client is the "server": closing it would drop nothing, but keep it usable
        if not self.uri.startswith("mongomock://"):
            import pymongo

            # close() ends the client's server sessions, selecting a server first: on a store that is gone that
            # would wait the whole server-selection timeout, and a stopping `serve` with it
            with pymongo.timeout(CLOSE_TIMEOUT_S):
                self.client.close()
        if self.owned_server_home is not None:
            embedded.stop_server(self.owned_server_home)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _port_of(uri: str) -> int | None:
    from urllib.parse import urlsplit

    return urlsplit(uri).port


def _build(
    uri: str,
    client: Any,
    db: Any,
    *,
    lock: threading.Lock | None = None,
    owned: Path | None = None,
    target: str | None = None,
) -> Store:
    store = Store(
        uri=uri,
        client=client,
        db=db,
        events=SummarisedEvents(db, serialize=lock),
        portfolios=PortfolioStore(db),
        executions=ExecutionLedger(db),
        memories=MemoryStore(db),
        owned_server_home=owned,
        target=target or f"{redact(uri)}#{db.name}",
    )
    store.ensure_indexes()  # idempotent, one createIndexes command a collection: repeated on every connect
    if pending_files(store.spool_dir):
        # events a crashed or cut-off run left on disk are stored before anything new is written
        report = store.recover_spool()
        if report.files:
            print(f"tradegraph: {report.line()}", file=sys.stderr)
    return store


def _connect_mongomock(uri: str) -> Store:
    import mongomock

    from database.mongomock_uniques import install

    install()  # mongomock checks a unique index by scanning the collection on every write (see the module)
    name = uri[len("mongomock://") :].strip("/").split("/")[-1] or DEFAULT_DB
    with _mock_guard:
        if uri not in _mock_clients:
            _mock_clients[uri] = (mongomock.MongoClient(), threading.Lock())
        client, lock = _mock_clients[uri]
    return _build(uri, client, client[name], lock=lock)


def _connect_mongodb(uri: str, timeout_s: float, owned: Path | None = None, target: str | None = None) -> Store:
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    ms = max(1, int(timeout_s * 1000))
    client: MongoClient[dict[str, Any]] | None = None
    try:
        client = MongoClient(uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, socketTimeoutMS=max(ms, 30000))
        client.admin.command("ping")
        db = client.get_default_database(default=DEFAULT_DB)
        return _build(uri, client, db, owned=owned, target=target)
    except (PyMongoError, ValueError) as exc:
        if client is not None:
            client.close()
        raise StoreUnavailable(f"MongoDB at {redact(uri)} unavailable: {_first_line(exc)}") from None


def _connect_embedded(home_path: Path, timeout_s: float, home: embedded.Home | None = None) -> Store:
    """The server running under home_path (on whatever port it has), else one started for this store."""
    try:
        port, pid, started = embedded.ensure_server(home_path)
    except (embedded.EmbeddedServerError, OSError) as exc:
        raise StoreUnavailable(f"embedded store under {home_path} unavailable: {_first_line(exc)}") from None
    owned = home_path.expanduser().resolve() if started else None
    if started:
        embedded.stop_at_exit(home_path, pid)
    try:
        # the embedded server's port changes per start: its spool target is its home
        store = _connect_mongodb(
            f"mongodb://{embedded.HOST}:{port}/{DEFAULT_DB}",
            timeout_s,
            owned=owned,
            target=f"embedded:{home_path.expanduser().resolve()}#{DEFAULT_DB}",
        )
        # whole-session reads go straight to its SQLite file (EventStore._read_local)
        store.events.local_file = embedded.database_file(home_path, store.db.name)
        store.embedded_home, store.timeout_s = home_path.expanduser().resolve(), timeout_s
        store.home = home
        return store
    except StoreUnavailable:
        if owned is not None:
            embedded.stop_server(owned)
        raise


def connect(uri: str | None = None, *, home: str | Path | None = None, timeout_s: float = 5.0) -> Store:
    """uri -> $MONGODB_URI -> an embedded nx-27017 server under home (default: embedded.resolve_home, i.e.
    $TRADEGRAPH_HOME, else a project's .tradegraph found upward, else the per-user data directory)."""
    uri = uri or os.environ.get("MONGODB_URI") or None
    if uri is None:
        if home is not None:
            return _connect_embedded(Path(home), timeout_s)
        found = embedded.resolve_home()
        return _connect_embedded(found.path, timeout_s, found)
    if uri.startswith("mongomock://"):
        return _connect_mongomock(uri)
    if uri.startswith(("mongodb://", "mongodb+srv://")):
        return _connect_mongodb(uri, timeout_s)
    raise StoreUnavailable(f"unsupported store URI {redact(uri)}: expected {', '.join(SCHEMES)}")
