"""The console's guards, beside the API's bearer check (graph/transports/http.py BearerAuth) and behind the Host and
Origin guard of the whole server (graph/transports/web_guard.py, which answers only to this server's own names):

- Sign-in: with TRADEGRAPH_API_TOKEN set the token is asked once; the cookie keeps a keyed hash of it (never the
  token itself), HttpOnly and SameSite=Strict, so page scripts cannot read it and other sites' requests do not
  carry it.
- CSRF: every state-changing request carries a form field that is the HMAC of this browser's random cookie under a
  key of this server (signed double-submit), and an Origin equal to the server's own: required here, where the
  server-wide guard lets a request without one through (programs send none; a browser always does on a POST).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Optional

from starlette.requests import Request

from graph.kernel.policy import Policy
from graph.transports.web_guard import is_own_origin

SESSION_COOKIE = "tg_console"
CSRF_COOKIE = "tg_csrf"
CSRF_FIELD = "csrf"
# the pages, the sign-in form and the stylesheet: what the console serves (the API's paths are BearerAuth's)
PREFIX = "/ui"


class Refused(Exception):
    """A request the console turns away: the status and the one line saying why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def is_console_path(path: str) -> bool:
    return path == "/" or path == PREFIX or path.startswith(PREFIX + "/")


def session_value(token: str) -> str:
    """What the sign-in cookie holds: a keyed hash of the token (stolen from disk, it is not the API token)."""
    return hmac.new(token.encode(), b"tradegraph console session v1", hashlib.sha256).hexdigest()


def signed_in(policy: Policy, cookies: dict[str, str], authorization: str = "") -> bool:
    if policy.token is None:
        return True
    given = cookies.get(SESSION_COOKIE, "")
    return hmac.compare_digest(given.encode(), session_value(policy.token).encode()) or policy.authorized(authorization)


class Csrf:
    """Signed double-submit: the browser's random cookie, and the form field HMAC(key, cookie)."""

    def __init__(self, key: Optional[bytes] = None):
        self.key = key or secrets.token_bytes(32)

    @staticmethod
    def new_cookie() -> str:
        return secrets.token_urlsafe(24)

    def field_for(self, cookie: str) -> str:
        return hmac.new(self.key, cookie.encode(), hashlib.sha256).hexdigest()

    def check(self, request: Request, field: Optional[str]) -> None:
        """Raises Refused (403) unless Origin is this server and the field matches this browser's cookie."""
        origin_refusal = origin_refused(request)
        if origin_refusal:
            raise Refused(403, origin_refusal)
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not field or not hmac.compare_digest(field.encode(), self.field_for(cookie).encode()):
            raise Refused(
                403,
                "refused: the form's CSRF token is missing or does not match this browser's "
                "(reload the page and submit again)",
            )


def origin_refused(request: Request) -> Optional[str]:
    """A state-changing request must say where it comes from (Origin, which browsers send on every POST) and that
    must be this server: scheme, host and port as the request reached it."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if not origin:
        return "refused: the request has no Origin header (a state-changing request must come from this console)"
    if not is_own_origin(origin, host, request.url.scheme):
        return f"refused: Origin {origin} is not this server ({request.url.scheme}://{host})"
    return None


def cookie_options(request: Request) -> dict:
    return {"httponly": True, "samesite": "strict", "secure": request.url.scheme == "https", "path": "/"}
