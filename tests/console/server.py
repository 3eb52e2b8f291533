"""The web console for tests, screenshots and the bench: `tradegraph serve`'s app (graph/transports/http.py
asgi_app) on a real uvicorn server in a thread, on a port the OS picks; Debian's chromium through Playwright; and
the sessions the pages show (a cycle paused for approval, a cycle with a hostile headline, a backtest)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# markup in a headline, as a feed could send it: the pages must show it as text and run none of it
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> <b>beats</b> & "soars"'


def chromium() -> Optional[str]:
    """Debian's browser (.ci/run installs it); None where there is none."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def skip_reason() -> Optional[str]:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return "no chromium on this machine (apt-get install -y chromium; .ci/run installs it)"
    return None


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def serving(kernel, host: str = "127.0.0.1") -> Iterator[str]:
    """The served app on a free port in a daemon thread; yields its base URL, stops it after."""
    import uvicorn

    from graph.transports.http import asgi_app

    sock = socket.socket()
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(asgi_app(kernel, host), log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the console's server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def hostile_news(folder: Path) -> Path:
    """A news file whose only AAPL headline before 2012-06-01 is markup."""
    path = folder / "hostile_news.jsonl"
    path.write_text(
        json.dumps({"symbol": "AAPL", "published_at": "2012-05-30", "headline": HOSTILE, "source": "test"}) + "\n"
    )
    return path


def paused_cycle(kernel, symbols: tuple[str, ...] = ("AAPL", "MSFT"), as_of: str = "2012-06-01", **extra: Any):
    """A cycle paused before EXECUTING (run in-process, as `tradegraph run --approve` would)."""
    return kernel.call("run_cycle", {"symbols": list(symbols), "as_of": as_of, "approve": True, **extra})
