"""`httpx.get`/`post`/`delete` for the loopback servers the tests start, one client per call as httpx's own, with
one TLS context shared by all. httpx builds a context from the CA bundle for every client (~35 ms of CPU, measured),
so each bare `httpx.post` paid for TLS that a plain-http loopback request never uses: with a few hundred such
requests and polls a run, that was seconds of the suite's CPU. Connections are not kept between calls, as before."""

from __future__ import annotations

from typing import Any

import httpx

_TLS = httpx.create_ssl_context()


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=_TLS, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=_TLS, **kwargs)


def delete(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.delete(url, verify=_TLS, **kwargs)
