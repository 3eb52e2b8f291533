"""Pure ASGI in front of the app as served when TRADEGRAPH_API_TOKEN is set: the console's paths need the sign-in
cookie (a browser cannot send the bearer header on a link), every other path goes on to the API's BearerAuth. Host
and Origin are checked before either, for every path, by graph/transports/web_guard.py."""

from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import quote

from graph.kernel.policy import Policy
from graph.transports.web.security import PREFIX, is_console_path, signed_in

LOGIN = PREFIX + "/login"
STATIC = PREFIX + "/static/"


def _headers(scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}


async def _plain(send, status: int, text: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *extra],
        }
    )
    await send({"type": "http.response.body", "body": text.encode()})


class ConsoleGuard:
    def __init__(self, app, api, policy: Policy):
        self.app, self.api, self.policy = app, api, policy

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not is_console_path(scope.get("path", "")):
            await self.api(scope, receive, send)
            return
        headers = _headers(scope)
        path = scope["path"]
        cookies = {k: v.value for k, v in SimpleCookie(headers.get("cookie", "")).items()}
        if not (
            path == LOGIN
            or path.startswith(STATIC)
            or signed_in(self.policy, cookies, headers.get("authorization", ""))
        ):
            if scope.get("method") == "GET":  # a person following a link: to the sign-in form, then back here
                await _plain(send, 303, "sign in first", ((b"location", f"{LOGIN}?next={quote(path)}".encode()),))
            else:
                await _plain(
                    send, 401, "refused: sign in to the console first (the server has TRADEGRAPH_API_TOKEN set)"
                )
            return
        await self.app(scope, receive, send)
