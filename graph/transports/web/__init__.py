"""The web console: server-rendered pages over the kernel, served by `tradegraph serve` at `/` (docs/console.md).

`mount(app, kernel)` adds the pages to the API's FastAPI app; `guarded(app, api, policy)` puts the console's guards
(Host, sign-in cookie) in front of its paths and leaves every other path to the API's own."""

from __future__ import annotations

from graph.transports.web.guard import ConsoleGuard
from graph.transports.web.pages import mount

__all__ = ["mount", "guarded"]


def guarded(app, api, policy) -> ConsoleGuard:
    return ConsoleGuard(app, api, policy)
