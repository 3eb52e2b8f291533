"""Writer processes SIGKILLed mid-append, forked from one server process: each writer is a process of its own with
its own store connection, killed for real at a moment the test picks; the server pays the interpreter's start and
the imports once, where a fresh `python -c` per writer paid them every time (2-4 s a writer under a full run's load:
nearly all of these tests' time).

A writer's script prints "ready" once it is connected, then one line per acknowledged batch; each writer prints to a
file of its own, so a line torn by the kill is that writer's last and never runs into the next writer's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# reads "<output file>\n" per writer to start, forks, answers the writer's pid. Killed writers are reaped by the
# kernel (SIGCHLD ignored), so a dead one is gone at once and never lingers as a zombie.
_SERVER = """
import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
exec(compile(sys.argv[1], "<preload>", "exec"), {})
script, args = sys.argv[2], sys.argv[3:]
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        fd = os.open(line.strip(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        sys.stdout = os.fdopen(1, "w")
        sys.argv = ["-c", *args]
        try:
            exec(compile(script, "<writer>", "exec"), {"__name__": "__main__"})
        except BaseException:
            import traceback
            traceback.print_exc()  # to the server's stderr: the test's
            os._exit(1)
        os._exit(0)
    print(pid, flush=True)
"""


class Writer:
    def __init__(self, pid: int, out: Path):
        self.pid, self.out = pid, out

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not (self.out.exists() and self.out.read_text().startswith("ready\n")):
            assert self.alive(), f"writer {self.pid} ended before it was ready: {self.out.read_text()!r}"
            assert time.monotonic() < deadline, f"writer {self.pid} not ready after {timeout_s} s"
            time.sleep(0.01)

    def kill(self) -> list[str]:
        """SIGKILL it; once it is gone, the lines it printed whole after "ready" (a torn last line is a batch whose
        acknowledgement was never fully reported)."""
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.alive():
            assert time.monotonic() < deadline, f"writer {self.pid} outlived SIGKILL"
            time.sleep(0.005)
        return self.out.read_text().split("\n")[1:-1]


class WriterServer:
    def __init__(self, proc: subprocess.Popen, folder: Path):
        self.proc, self.folder, self.started = proc, folder, 0

    def start(self) -> Writer:
        """A new writer, connected and writing once this returns."""
        out = self.folder / f"writer-{self.started}.out"
        self.started += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{out}\n")
        self.proc.stdin.flush()
        writer = Writer(int(self.proc.stdout.readline()), out)
        writer.wait_ready()
        return writer


@contextmanager
def writer_server(script: str, args: list[str], folder: Path, preload: str) -> Iterator[WriterServer]:
    """A fork server for `script` (run as `python -c script *args` would be), with `preload` imported first."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, preload, script, *args],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        yield WriterServer(proc, folder)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the server's loop ends
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
