"""The embedded nx-27017 server: start, stop, reuse, persistence across processes, clear failures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from database import StoreUnavailable, connect, server_status, start_server, stop_server
from database.embedded import pid_alive

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def run_py(code: str, home: Path, timeout: float = 60) -> str:
    env = {**os.environ, "TRADEGRAPH_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("MONGODB_URI", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def event(i: int, session: str = "P") -> dict:
    return {
        "event_id": f"{session}-{i}",
        "session_id": session,
        "cycle_id": "c1",
        "ts": 1_700_000_000.0 + i,
        "state": "SCANNING",
        "kind": "transition",
        "payload": {"i": i},
    }


def test_connect_without_uri_starts_persists_and_stops(tg_home: Path) -> None:
    store = connect()
    st = server_status(tg_home)
    assert st["running"] and store.uri == f"mongodb://127.0.0.1:{st['port']}/tradegraph"
    assert (tg_home / "data").is_dir() and (tg_home / "server.json").exists()
    store.events.append([event(i) for i in range(3)])
    store.close()
    assert not pid_alive(st["pid"]), "a server this process started must stop with the Store"
    assert not server_status(tg_home)["running"]

    # a new process, a new server on the same files: the events are still there
    out = run_py(
        "from database import connect\n"
        "s = connect(); print([e['seq'] for e in s.events.read('P')]); "
        "print(s.events.append([dict(event_id='P-9', session_id='P', cycle_id='c2', ts=2e9, state='X', "
        "kind='error', payload={})])[0]['seq']); s.close()",
        tg_home,
    )
    assert out.splitlines() == ["[1, 2, 3]", "4"]
    assert not server_status(tg_home)["running"]


def test_server_stopped_at_interpreter_exit(tg_home: Path) -> None:
    out = run_py("from database import connect, server_status\ns = connect()\nprint(server_status()['pid'])", tg_home)
    pid = int(out)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid), "an unclosed Store's server must be stopped by atexit"


def test_running_server_is_reused_and_not_stopped(tg_home: Path) -> None:
    port, pid = start_server(tg_home)
    try:
        assert start_server(tg_home) == (port, pid)
        a, b = connect(), connect()
        assert a.client.address == b.client.address == ("127.0.0.1", port)
        a.events.append([event(1, "R")])
        a.close()
        assert b.events.count("R") == 1  # closing one Store left the shared server up
        b.close()
        st = server_status(tg_home)
        assert st["running"] and (st["port"], st["pid"]) == (port, pid)
        # other processes reuse it too, and leave it running
        assert (
            run_py(
                "from database import connect\ns = connect(); print(s.client.address[1], s.events.count('R')); s.close()",
                tg_home,
            )
            == f"{port} 1"
        )
        assert server_status(tg_home)["running"]
    finally:
        assert stop_server(tg_home) is True
    assert not pid_alive(pid) and not server_status(tg_home)["running"]
    assert stop_server(tg_home) is False


def test_concurrent_starts_share_one_server(tg_home: Path) -> None:
    env = {**os.environ, "TRADEGRAPH_HOME": str(tg_home), "PYTHONPATH": str(REPO)}
    code = "from database import start_server; print(*start_server())"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)
    ]
    try:
        outs = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert len(outs) == 1, f"the start lock let several servers start: {outs}"
        port, pid = map(int, outs.pop().split())
        assert json.loads((tg_home / "server.json").read_text())["pid"] == pid
    finally:
        stop_server(tg_home)


def test_unreachable_server_fails_fast_with_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"mongodb://trader:s3cret@127.0.0.1:{port}/tg"
    monkeypatch.setenv("MONGODB_URI", uri)
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        connect()  # default timeout_s
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    assert f"127.0.0.1:{port}" in msg and "trader:***@" in msg and "s3cret" not in msg
    assert "\n" not in msg


def test_unsupported_uri_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="unsupported store URI redis://"):
        connect("redis://localhost")


@pytest.mark.parametrize("left_behind", ["zombie", "recycled"])
def test_a_pid_file_left_by_a_killed_server_does_not_keep_the_store_down(tg_home: Path, left_behind: str) -> None:
    """A SIGKILLed server leaves nx-27017.pid behind. nx-27017 refuses to start while that pid answers kill(0),
    which an unreaped zombie and a pid recycled by another process both do (CI: "NX-27017 is already running")."""
    port, pid = start_server(tg_home)
    stop_server(tg_home)
    other = subprocess.Popen(["sleep", "60"])
    try:
        if left_behind == "zombie":
            other.kill()
            deadline = time.monotonic() + 5
            while Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                assert time.monotonic() < deadline
                time.sleep(0.01)
        (tg_home / "nx-27017.pid").write_text(str(other.pid))
        os.kill(other.pid, 0)  # what nx-27017 asks: the stale pid still answers
        new_port, new_pid = start_server(tg_home)
        assert server_status(tg_home)["running"] and new_pid not in (pid, other.pid)
        if left_behind == "recycled":
            assert other.poll() is None, "an unrelated process named by a stale pid file must not be signalled"
    finally:
        stop_server(tg_home)
        other.kill()
        other.wait()
