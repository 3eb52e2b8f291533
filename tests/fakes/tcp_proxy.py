"""A loopback TCP proxy that injects network faults between a client and a server.

`cut()` closes every open connection and refuses new ones (a store restart, a cable pulled);
`restore()` lets connections through again. `drop_matching(pattern, n)` swallows the n-th
client→server MongoDB wire message whose bytes contain `pattern` and then resets that connection,
so the server never sees it (a packet lost mid-insert). `hold_matching(pattern)` keeps the first such message
from the server, its sender waiting for a reply that never comes (a store that stalls), until `release()` drops it
and resets that connection; `held` is set once one is held. Counters tell the test what happened.
"""

from __future__ import annotations

import socket
import struct
import threading


class FaultyProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(64)
        self.port = self._lsock.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._refusing = False
        self._drop: tuple[bytes, int] | None = None
        self._seen_matching = 0
        self._hold: bytes | None = None
        self.held = threading.Event()
        self._released = threading.Event()
        self.cuts = 0
        self.dropped = 0
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    # ------------------------------------------------------------------ faults
    def cut(self) -> None:
        with self._lock:
            self._refusing = True
            self.cuts += 1
            conns, self._conns = self._conns, []
        for c in conns:
            _close(c)

    def restore(self) -> None:
        with self._lock:
            self._refusing = False

    def drop_matching(self, pattern: bytes, nth: int = 1) -> None:
        with self._lock:
            self._drop, self._seen_matching = (pattern, nth), 0

    def hold_matching(self, pattern: bytes) -> None:
        with self._lock:
            self._hold = pattern
        self.held.clear()
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        self._stopped = True
        self.cut()
        _close(self._lsock)

    # ------------------------------------------------------------------ plumbing
    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._lsock.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:  # a cut while the upstream connection was made: this one is cut too, not left open
                refusing = self._refusing
                if not refusing:
                    self._conns += [client, server]
            if refusing:
                _close(client)
                _close(server)
                continue
            threading.Thread(target=self._pump_messages, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump_bytes, args=(server, client), daemon=True).start()

    def _pump_messages(self, src: socket.socket, dst: socket.socket) -> None:
        """client → server, one wire message at a time (4-byte little-endian length prefix)."""
        try:
            while True:
                head = _recv_exact(src, 4)
                if head is None:
                    break
                (length,) = struct.unpack("<i", head)
                body = _recv_exact(src, length - 4)
                if body is None:
                    break
                if self._should_drop(head + body):
                    break  # swallowed: reset both sides, as a lost packet and a dead connection look
                if self._should_hold(head + body):
                    self.held.set()
                    self._released.wait()
                    break  # never delivered
                dst.sendall(head + body)
        except OSError:
            pass
        _close(src)
        _close(dst)

    def _should_drop(self, message: bytes) -> bool:
        with self._lock:
            if self._drop is None or self._drop[0] not in message:
                return False
            self._seen_matching += 1
            if self._seen_matching != self._drop[1]:
                return False
            self._drop = None
            self.dropped += 1
            return True

    def _should_hold(self, message: bytes) -> bool:
        with self._lock:
            if self._hold is None or self._hold not in message:
                return False
            self._hold = None
            return True

    @staticmethod
    def _pump_bytes(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
