"""Embedded store: an nx-27017 (MongoDB wire protocol over SQLite) server per home (resolve_home: where).

Layout under home: data/<db>.db (one SQLite file per logical database, so test databases
and `drop_database` stay isolated; the single-file mode shares one namespace across
databases), nx-27017.log, nx-27017.pid, server.json (pid+port of the running server),
server.lock (fcntl lock serialising start/stop between processes).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0

# Popen handles of servers this process started: reaped on stop so a dead server never
# lingers as a zombie that still looks alive to os.kill(pid, 0)
_children: dict[int, subprocess.Popen] = {}


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started or stopped."""


PROJECT_DIR = ".tradegraph"


@dataclass(frozen=True)
class Home:
    """Where the store's data and spool live, and why there (what `store status` and a not-found error say)."""

    path: Path
    chosen_by: str  # "TRADEGRAPH_HOME", "project" (a .tradegraph found upward), "user" (the per-user directory)

    def reason(self) -> str:
        return {
            "TRADEGRAPH_HOME": "from $TRADEGRAPH_HOME",
            "project": f"the {PROJECT_DIR} folder found from here",
            "user": "the per-user default",
        }[self.chosen_by]

    def describe(self) -> str:
        return f"{self.path} ({self.reason()})"


def user_home(env: Mapping[str, str] | None = None) -> Path:
    """The per-user data directory (XDG Base Directory): $XDG_DATA_HOME/tradegraph, else
    ~/.local/share/tradegraph. A relative $XDG_DATA_HOME is ignored, as the specification says."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "share"
    return root / "tradegraph"


def project_home(start: Path | None = None) -> Path | None:
    """A `.tradegraph` folder in `start` (the working directory) or the nearest folder above it, as git finds
    `.git`: a project keeps its store next to it, from any of its subfolders."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_DIR
        if candidate.is_dir():
            return candidate
    return None


def resolve_home(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Home:
    """$TRADEGRAPH_HOME; else a `.tradegraph` found from the working directory upward (an existing project store
    wins: nothing splits); else the per-user directory, the same from every folder. A new store is never made in
    the working directory by accident: a project store is one you created (`mkdir .tradegraph`)."""
    env = os.environ if env is None else env
    if env.get("TRADEGRAPH_HOME"):
        return Home(Path(env["TRADEGRAPH_HOME"]).expanduser().resolve(), "TRADEGRAPH_HOME")
    found = project_home(cwd)
    if found is not None:
        return Home(found, "project")
    return Home(user_home(env).expanduser().resolve(), "user")


def default_home() -> Path:
    return resolve_home().path


def _paths(home: str | Path) -> dict[str, Path]:
    h = Path(home).expanduser().resolve()
    return {
        "home": h,
        "data": h / "data",
        "log": h / "nx-27017.log",
        "pid": h / "nx-27017.pid",
        "state": h / "server.json",
        "lock": h / "server.lock",
    }


@contextlib.contextmanager
def _locked(home: str | Path) -> Iterator[dict[str, Path]]:
    p = _paths(home)
    p["home"].mkdir(parents=True, exist_ok=True)
    with open(p["lock"], "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield p
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# Run nx-27017 through database/nx_27017_server.py, which makes each insert command one SQLite transaction
# (see there). False starts the plain `nx-27017` script (benchmarks compare the two).
BATCHED_INSERTS = True
SERVER_SCRIPT = Path(__file__).with_name("nx_27017_server.py")


def _server_cmd(p: dict[str, Path], port: int) -> list[str]:
    exe = Path(sys.executable).parent / "nx-27017"
    if BATCHED_INSERTS:
        base = [sys.executable, str(SERVER_SCRIPT)]
    else:
        base = [str(exe)] if exe.exists() else [shutil.which("nx-27017") or "nx-27017"]
    return base + [
        "--host",
        HOST,
        "-p",
        str(port),
        "--data-dir",
        str(p["data"]),
        "--log-file",
        str(p["log"]),
        "--pid-file",
        str(p["pid"]),
    ]


def database_file(home: str | Path, db_name: str) -> Path:
    """The SQLite file the embedded server under home keeps a logical database in (nx-27017 --data-dir)."""
    return _paths(home)["data"] / f"{db_name}.db"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie answers kill(0) but serves nothing
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_our_server(pid: int) -> bool:
    """Guards against signalling an unrelated process that recycled a stale pid."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return pid_alive(pid)  # no /proc (macOS): trust the state file
    return b"nx-27017" in cmd or b"nx_27017" in cmd


def _ping(port: int, timeout_s: float = 1.0) -> bool:
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    ms = int(timeout_s * 1000)
    client: MongoClient[dict[str, Any]] = MongoClient(
        HOST, port, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, directConnection=True
    )
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


def answers(port: int) -> bool:
    """A server on this loopback port answers ping (a dead port refuses at once)."""
    return _ping(port)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _read_state(p: dict[str, Path]) -> dict[str, Any] | None:
    try:
        return json.loads(p["state"].read_text())
    except (OSError, ValueError):
        return None


def recorded_port(home: str | Path) -> int | None:
    """The port server.json names for home's server, 0 when none is recorded (stopped), None while the file
    can't be read whole (being rewritten: ask again later). Read without the lock and without pinging: cheap."""
    p = _paths(home)
    if not p["state"].exists():
        return 0
    state = _read_state(p)
    return int(state.get("port") or 0) if state is not None else None


def _status(p: dict[str, Path]) -> dict[str, Any]:
    state = _read_state(p) or {}
    pid, port = int(state.get("pid", 0)), int(state.get("port", 0))
    running = bool(pid and port and pid_alive(pid) and _is_our_server(pid) and _ping(port))
    return {
        "running": running,
        "pid": pid or None,
        "port": port or None,
        "uri": f"mongodb://{HOST}:{port}" if running else None,
        "home": str(p["home"]),
        "data_dir": str(p["data"]),
        "log": str(p["log"]),
    }


def server_status(home: str | Path | None = None) -> dict[str, Any]:
    """{running, pid, port, uri, home, data_dir, log} of the server recorded for home."""
    return _status(_paths(home or default_home()))


def _log_tail(p: dict[str, Path], n: int = 3) -> str:
    with contextlib.suppress(OSError):
        lines = [ln for ln in p["log"].read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(lines[-n:])
    return "no log"


def _serves_home(pid: int, p: dict[str, Path]) -> bool:
    """pid is a live server started for this home (its command line names this home's pid file)."""
    if not pid_alive(pid):
        return False
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return True  # no /proc (macOS): trust the pid file
    return str(p["pid"]).encode() in cmd


def _clear_stale_pid_file(p: dict[str, Path], grace_s: float = 2.0) -> None:
    """nx-27017 refuses to start while its pid file names a process that answers kill(0), which a SIGKILLed
    server nobody has reaped yet (a zombie) and a recycled pid both do: the store could then never start again
    after a crash. A server of this home still alive after the grace keeps its file, and nx refuses to start a
    second writer over the same data."""
    try:
        pid = int(p["pid"].read_text().strip())
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + grace_s
    while _serves_home(pid, p) and time.monotonic() < deadline:  # a SIGKILL on its way
        time.sleep(0.05)
    if not _serves_home(pid, p):
        with contextlib.suppress(FileNotFoundError):
            p["pid"].unlink()


def _spawn(p: dict[str, Path]) -> tuple[int, int]:
    p["data"].mkdir(parents=True, exist_ok=True)
    _clear_stale_pid_file(p)
    last = "not started"
    for _ in range(3):  # the free port can be taken between probe and bind: retry on another
        port = _free_port()
        with open(p["log"], "ab") as log:
            # own session: a Ctrl-C in the terminal must not kill a server other processes share
            proc = subprocess.Popen(
                _server_cmd(p, port), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        _children[proc.pid] = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                last = f"exited with code {proc.returncode}: {_log_tail(p)}"
                _children.pop(proc.pid, None)
                break
            if _ping(port, 0.3):
                state = {"pid": proc.pid, "port": port, "started_ts": time.time(), "data_dir": str(p["data"])}
                p["state"].write_text(json.dumps(state))
                return port, proc.pid
            time.sleep(0.05)
        else:
            _terminate(proc.pid)
            raise EmbeddedServerError(f"nx-27017 for {p['home']} did not answer ping within {START_TIMEOUT_S:.0f}s")
    raise EmbeddedServerError(f"nx-27017 for {p['home']} failed to start ({last})")


def _terminate(pid: int, timeout_s: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)  # a stopped server (SIGSTOP, Ctrl-Z) handles the TERM only once continued
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout_s)


def ensure_server(home: str | Path | None = None) -> tuple[int, int, bool]:
    """(port, pid, started_here): reuse a live server for home, else start one."""
    with _locked(home or default_home()) as p:
        st = _status(p)
        if st["running"]:
            return st["port"], st["pid"], False
        port, pid = _spawn(p)
        return port, pid, True


def start_server(home: str | Path | None = None) -> tuple[int, int]:
    """Start (or reuse) a detached server for home; it outlives this process until stop_server."""
    port, pid, _ = ensure_server(home)
    return port, pid


def stop_server(home: str | Path | None = None) -> bool:
    """Stop the server recorded for home; False if none was running."""
    with _locked(home or default_home()) as p:
        state = _read_state(p) or {}
        pid = int(state.get("pid", 0))
        stopped = False
        # a child of this process is ours even when its /proc cmdline is already empty (a zombie after SIGKILL)
        if pid and pid_alive(pid) and (pid in _children or _is_our_server(pid)):
            _terminate(pid)
            stopped = True
        with contextlib.suppress(FileNotFoundError):
            p["state"].unlink()
        return stopped


def stop_at_exit(home: str | Path, pid: int) -> None:
    """Register an atexit stop for a server this process started (no-op if already stopped)."""
    home = Path(home).expanduser().resolve()

    def _stop() -> None:
        state = _read_state(_paths(home)) or {}
        if int(state.get("pid", 0)) == pid:
            with contextlib.suppress(Exception):
                stop_server(home)

    atexit.register(_stop)
