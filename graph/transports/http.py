"""HTTP transport: FastAPI over the kernel. Each capability's endpoint is derived from its registry entry and models
(`endpoint`): it maps a request onto one Kernel.call and the kernel's errors onto statuses
(kernel.errors.ERROR_TABLE); nothing else happens here. Two endpoints are written out, being no capability: a task's
progress as Server-Sent Events and the download of one of its files.

`serve()` applies the bind policy first: loopback by default, anywhere else only with a token. The served app
answers only to its own Host names and refuses cross-origin state-changing requests (graph/transports/web_guard.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from inspect import Parameter, Signature
from typing import Annotated, Any, Optional, cast

from fastapi import Body, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from graph.kernel import models as m
from graph.kernel.capabilities import Capability
from graph.kernel.core import Kernel
from graph.kernel.errors import BadInput, Failed, KernelError, NotFound, Unauthorized, http_status, validation_line
from graph.kernel.idempotent import caller_of_token
from graph.kernel.policy import Policy, check_bind
from graph.kernel.tasks import TERMINAL
from graph.services.run_files import UnsafeRunPath, iter_run_file
from graph.transports.routes import ARTIFACT_FILE, TASK_EVENTS, rest_model

TRANSPORT = "http"


class ErrorBody(BaseModel):
    error: str
    message: str
    field: Optional[str] = None


# the IETF httpapi draft's header on every request that starts something
IdempotencyHeader = Annotated[
    Optional[m.IdempotencyKey], Header(alias="Idempotency-Key", description=m.IDEMPOTENCY_KEY_HELP)
]
# read only to tell callers' keys apart (its hash); BearerAuth has checked it already
AuthHeader = Annotated[Optional[str], Header(alias="Authorization", include_in_schema=False)]

ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorBody} for s in (401, 403, 404, 409, 422, 500, 503)}


def _error(err: KernelError) -> JSONResponse:
    return JSONResponse(err.to_dict(), status_code=http_status(err))


class BearerAuth:
    """Pure ASGI, so it guards every path (OpenAPI and SSE included) and works for the MCP app too."""

    def __init__(self, app, policy: Policy):
        self.app, self.policy = app, policy

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if not self.policy.authorized(header):
                err = Unauthorized(
                    "missing or wrong bearer token (the server has TRADEGRAPH_API_TOKEN set)", field="Authorization"
                )
                body = json.dumps(err.to_dict()).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


# the handler's own parameters beside the capability's path parameters
BODY, QUERY, KEY, AUTHORIZATION = "body", "query", "key", "authorization"


def endpoint(kernel: Kernel, cap: Capability) -> Callable[..., BaseModel]:
    """The capability's handler, derived from its route and input model (graph/transports/routes.py): its path
    parameters typed as the input model types them, the other fields as one body or query model, and on a keyed
    capability the Idempotency-Key header (and the caller's token, to tell callers' keys apart). FastAPI reads the
    parameters from the signature, so the OpenAPI document is the same as for a handler written out by hand."""
    fields = cap.input_model.model_fields
    params = []
    for p in cap.http.path_params:
        if p in (BODY, QUERY, KEY, AUTHORIZATION):
            raise TypeError(f"{cap.name}: a path parameter may not be named {p!r}")
        params.append(
            Parameter(
                p,
                Parameter.KEYWORD_ONLY,
                annotation=Annotated[
                    fields[p].annotation, Path(description=fields[p].description), *fields[p].metadata
                ],
            )
        )
    rest = rest_model(cap)
    if rest is not None and cap.http.body:
        # a POST whose path names its subject may come without a body when the rest has defaults (approve)
        optional = rest is not cap.input_model and not any(f.is_required() for f in rest.model_fields.values())
        params.append(
            Parameter(
                BODY,
                Parameter.KEYWORD_ONLY,
                default=None if optional else Parameter.empty,
                annotation=Annotated[Optional[rest], Body()] if optional else rest,
            )
        )
    elif rest is not None:
        params.append(Parameter(QUERY, Parameter.KEYWORD_ONLY, annotation=Annotated[rest, Query()]))
    if cap.keyed:
        params += [
            Parameter(KEY, Parameter.KEYWORD_ONLY, default=None, annotation=IdempotencyHeader),
            Parameter(AUTHORIZATION, Parameter.KEYWORD_ONLY, default=None, annotation=AuthHeader),
        ]

    def handle(**given: Any) -> BaseModel:
        key, authorization = given.pop(KEY, None), given.pop(AUTHORIZATION, None)
        model = given.pop(BODY, None) or given.pop(QUERY, None)
        args = {**(model.model_dump() if model is not None else {}), **given}
        return kernel.call_keyed(
            cap.name,
            {k: v for k, v in args.items() if v is not None},
            transport=TRANSPORT,
            idempotency_key=key,
            caller=caller_of_token(authorization),
        )

    handle.__signature__ = Signature(params, return_annotation=cap.output_model)  # type: ignore[attr-defined]
    handle.__name__ = handle.__qualname__ = cap.name
    return handle


def create_app(kernel: Kernel) -> FastAPI:
    app = FastAPI(
        title="tradegraph",
        version="0.1.0",
        responses=ERRORS,
        description="The tradegraph capability kernel over HTTP. Errors: "
        "{error, message, field}; 422 bad input, 404 not found, 409 conflict, "
        "403 refused by policy, 503 store unavailable, 500 failed.",
    )

    def call(name: str, /, **args: Any) -> BaseModel:
        return kernel.call(name, {k: v for k, v in args.items() if v is not None}, transport=TRANSPORT)

    @app.exception_handler(KernelError)
    async def kernel_error(_: Request, exc: KernelError):
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError):
        line, field = validation_line(exc)
        return _error(BadInput(line, field=field))

    @app.exception_handler(StarletteHTTPException)
    async def routing(request: Request, exc: StarletteHTTPException):
        # an unknown path or method: the same error body as the kernel's
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(
            {"error": kind, "message": f"{request.method} {request.url.path}: {exc.detail}", "field": None},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception):  # pragma: no cover - Kernel.call maps everything first
        return _error(Failed(f"{type(exc).__name__}: {exc}"))

    for cap in kernel.capabilities().values():
        app.add_api_route(
            cap.http.path,
            endpoint(kernel, cap),
            methods=[cap.http.method],
            operation_id=cap.name,
            response_model=cap.output_model,
            status_code=cap.http.status,
            tags=[cap.http.tag],
            description=cap.description,
        )

    # not capabilities, so written here: a file's bytes (not a JSON output model) and a progress stream
    @app.get(
        ARTIFACT_FILE,
        tags=["tasks"],
        response_class=FileResponse,
        operation_id="task_artifact_file",
        responses={200: {"content": {"application/octet-stream": {}}}},
    )
    def task_artifact_file(task_id: m.TaskId, name: m.ArtifactName):
        listed = cast(m.ArtifactsOutput, call("task_artifacts", task_id=task_id))
        found = {a.name: a for a in listed.artifacts}
        if name not in found:
            raise NotFound(f"task {task_id} has no artifact '{name}' (has: {', '.join(found) or 'none'})", field="name")
        try:  # opened here without following a link (a file swapped for one since it was listed is refused)
            size, chunks = iter_run_file(found[name].path)
        except UnsafeRunPath as e:
            raise BadInput(str(e), field="name") from None
        return StreamingResponse(
            chunks,
            media_type=found[name].media_type,
            headers={"Content-Disposition": f'attachment; filename="{name}"', "Content-Length": str(size)},
        )

    @app.get(
        TASK_EVENTS,
        tags=["tasks"],
        response_class=StreamingResponse,
        operation_id="task_events",
        responses={
            200: {
                "content": {"text/event-stream": {}},
                "description": "`progress` events (a TaskView each), then one `end` event",
            }
        },
    )
    def task_events(task_id: m.TaskId):
        call("task_status", task_id=task_id)  # a 404 before the stream opens, not inside it

        def stream():
            try:
                for v in kernel.watch(task_id):
                    yield f"event: {'end' if v.status in TERMINAL else 'progress'}\ndata: {v.model_dump_json()}\n\n"
            except KernelError as e:
                yield f"event: error\ndata: {json.dumps(e.to_dict())}\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    from graph.transports.web import mount

    mount(app, kernel)  # the web console's pages at / and /ui/... (graph/transports/web/, docs/console.md)
    return app


def asgi_app(kernel: Kernel, host: str = "127.0.0.1"):
    """The app as served: behind the Host and Origin guard (graph/transports/web_guard.py), then the bearer check
    when a token is configured."""
    from graph.transports.web_guard import guarded

    policy = kernel.policies[TRANSPORT]
    app = create_app(kernel)
    from graph.transports.web import guarded as console_guarded

    # with a token, the console's pages take the sign-in cookie instead of the bearer header (a link cannot carry it)
    served = console_guarded(app, BearerAuth(app, policy), policy) if policy.token else app
    return guarded(served, host)


# how long a stopping server waits for requests still running: one waiting on a store that is gone (pymongo's
# server selection, 5 s; a hung server's socket, 30 s) would otherwise hold the stop for as long. A request cut off
# here ends like a crash: its audit so far is stored or spooled, a half-done fill completed on the next connect
SHUTDOWN_GRACE_S = 1  # whole seconds: uvicorn takes an int


def exit_cleanly_on_sigterm() -> None:
    """uvicorn re-raises SIGTERM once it has shut down; with the default handler the process would die
    there, before closing the store, and leak the embedded server it started. Exit through Python instead."""
    import signal
    import sys
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    db: Optional[str] = None,
    kernel: Optional[Kernel] = None,
    log_level: str = "info",
) -> None:
    """Refuses a non-loopback host without TRADEGRAPH_API_TOKEN before opening the store."""
    import uvicorn

    check_bind(host, Policy.for_transport(TRANSPORT))
    exit_cleanly_on_sigterm()
    kernel = kernel or Kernel.open(db)
    try:
        uvicorn.run(
            asgi_app(kernel, host),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    finally:
        kernel.close()
