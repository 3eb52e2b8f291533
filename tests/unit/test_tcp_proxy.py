"""The fault proxy's `cut()` leaves no connection open, one being set up as it came included: a connection that
outlived a cut let a store-fault test's cycle fill with its store "cut" (tests/faults/test_store_faults.py)."""

from __future__ import annotations

import socket
import threading

from tests.fakes import tcp_proxy
from tests.fakes.tcp_proxy import FaultyProxy


def test_a_connection_set_up_while_the_proxy_is_cut_is_closed(monkeypatch):
    upstream = socket.create_server(("127.0.0.1", 0))
    connecting, cut_done = threading.Event(), threading.Event()
    real = socket.create_connection

    def slow_upstream(*a, **k):  # the cut lands between the proxy's refusal check and its registering the pair
        connecting.set()
        cut_done.wait(5)
        return real(*a, **k)

    monkeypatch.setattr(tcp_proxy.socket, "create_connection", slow_upstream)
    proxy = FaultyProxy(upstream.getsockname()[1])
    try:
        client = real(("127.0.0.1", proxy.port), timeout=5)
        assert connecting.wait(5)
        proxy.cut()
        cut_done.set()
        client.settimeout(5)
        assert client.recv(1) == b"", "the connection outlived the cut"
    finally:
        proxy.close()
        upstream.close()
