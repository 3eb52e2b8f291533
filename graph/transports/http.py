"""HTTP transport: FastAPI over the kernel. Each endpoint maps a request onto one Kernel.call and the
kernel's errors onto statuses (kernel.errors.ERROR_TABLE); nothing else happens here.

`serve()` applies the bind policy first: loopback by default, anywhere else only with a token.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Optional

from fastapi import Body, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from graph.kernel import models as m
from graph.kernel.core import Kernel
from graph.kernel.errors import BadInput, Failed, KernelError, NotFound, Unauthorized, http_status, validation_line
from graph.kernel.idempotent import caller_of_token
from graph.kernel.policy import Policy, check_bind
from graph.kernel.tasks import TERMINAL
from graph.transports.routes import ROUTES, TASK_EVENTS

TRANSPORT = "http"


class ErrorBody(BaseModel):
    error: str
    message: str
    field: Optional[str] = None


# the IETF httpapi draft's header on every request that starts something
IdempotencyHeader = Annotated[Optional[m.IdempotencyKey], Header(alias="Idempotency-Key",
                                                                 description=m.IDEMPOTENCY_KEY_HELP)]
# read only to tell callers' keys apart (its hash); BearerAuth has checked it already
AuthHeader = Annotated[Optional[str], Header(alias="Authorization", include_in_schema=False)]

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (401, 403, 404, 409, 422, 500, 503)}


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
                err = Unauthorized("missing or wrong bearer token (the server has TRADEGRAPH_API_TOKEN set)",
                                   field="Authorization")
                body = json.dumps(err.to_dict()).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def create_app(kernel: Kernel) -> FastAPI:
    app = FastAPI(title="tradegraph", version="0.1.0", responses=ERRORS,
                  description="The tradegraph capability kernel over HTTP. Errors: "
                              "{error, message, field}; 422 bad input, 404 not found, 409 conflict, "
                              "403 refused by policy, 503 store unavailable, 500 failed.")

    def call(name: str, /, **args: Any) -> BaseModel:
        return kernel.call(name, {k: v for k, v in args.items() if v is not None}, transport=TRANSPORT)

    def call_keyed(name: str, key: Optional[str], authorization: Optional[str], /, **args: Any) -> BaseModel:
        """A request that starts something, once per Idempotency-Key (graph/kernel/idempotent.py)."""
        return kernel.call_keyed(name, {k: v for k, v in args.items() if v is not None}, transport=TRANSPORT,
                                 idempotency_key=key, caller=caller_of_token(authorization))

    def path(name: str) -> str:
        return ROUTES[name].path

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
        return JSONResponse({"error": kind, "message": f"{request.method} {request.url.path}: {exc.detail}",
                             "field": None}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception):  # pragma: no cover - Kernel.call maps everything first
        return _error(Failed(f"{type(exc).__name__}: {exc}"))

    @app.post(path("run_cycle"), response_model=m.CycleOutput, tags=["cycles"])
    def run_cycle(body: m.RunCycleInput, key: IdempotencyHeader = None, authorization: AuthHeader = None):
        return call_keyed("run_cycle", key, authorization, **body.model_dump())

    @app.post(path("approve"), response_model=m.CycleOutput, tags=["cycles"])
    def approve(session_id: m.SessionId, body: Annotated[Optional[m.ApprovalDecision], Body()] = None,
                key: IdempotencyHeader = None, authorization: AuthHeader = None):
        return call_keyed("approve", key, authorization, session_id=session_id,
                          **(body or m.ApprovalDecision()).model_dump())

    @app.get(path("list_sessions"), response_model=m.SessionsOutput, tags=["audit"])
    def list_sessions(q: Annotated[m.ListSessionsInput, Query()]):
        return call("list_sessions", **q.model_dump())

    @app.delete(path("delete_session"), response_model=m.DeletionOutput, tags=["audit"])
    def delete_session(session_id: m.SessionId, q: Annotated[m.RetentionOptions, Query()]):
        return call("delete_session", session_id=session_id, **q.model_dump())

    @app.post(path("prune_sessions"), response_model=m.DeletionOutput, tags=["audit"])
    def prune_sessions(body: m.PruneSessionsInput):
        return call("prune_sessions", **body.model_dump())

    @app.get(path("read_events"), response_model=m.EventsOutput, tags=["audit"])
    def read_events(session_id: m.SessionId, q: Annotated[m.EventsQuery, Query()]):
        return call("read_events", session_id=session_id, **q.model_dump())

    @app.get(path("portfolio"), response_model=m.PortfolioView, tags=["audit"])
    def portfolio(session_id: m.SessionId):
        return call("portfolio", session_id=session_id)

    @app.get(path("replay"), response_model=m.ReplayOutput, tags=["audit"])
    def replay(session_id: m.SessionId):
        return call("replay", session_id=session_id)

    @app.post(path("verify"), response_model=m.VerifyOutput, tags=["audit"])
    def verify(session_id: m.SessionId):
        return call("verify", session_id=session_id)

    @app.get(path("features"), response_model=m.FeatureBundle, tags=["data"])
    def features(symbol: m.Ticker, q: Annotated[m.FeaturesQuery, Query()]):
        return call("features", symbol=symbol, **q.model_dump())

    @app.get(path("memory_search"), response_model=m.MemorySearchOutput, tags=["memory"])
    def memory_search(symbol: m.Ticker, q: Annotated[m.MemoryQuery, Query()]):
        return call("memory_search", symbol=symbol, **q.model_dump())

    @app.get(path("contract_schemas"), response_model=m.SchemasOutput, tags=["data"])
    def contract_schemas(q: Annotated[m.SchemasInput, Query()]):
        return call("contract_schemas", **q.model_dump())

    @app.get(path("store_status"), response_model=m.StoreStatusOutput, tags=["data"])
    def store_status():
        return call("store_status")

    @app.post(path("start_backtest"), response_model=m.TaskView, status_code=202, tags=["tasks"])
    def start_backtest(body: m.BacktestInput, key: IdempotencyHeader = None, authorization: AuthHeader = None):
        return call_keyed("start_backtest", key, authorization, **body.model_dump())

    @app.post(path("start_sweep"), response_model=m.TaskView, status_code=202, tags=["tasks"])
    def start_sweep(body: m.SweepInput, key: IdempotencyHeader = None, authorization: AuthHeader = None):
        return call_keyed("start_sweep", key, authorization, **body.model_dump())

    @app.post(path("start_benchmark"), response_model=m.TaskView, status_code=202, tags=["benchmarks"])
    def start_benchmark(body: m.BenchmarkInput, key: IdempotencyHeader = None, authorization: AuthHeader = None):
        return call_keyed("start_benchmark", key, authorization, **body.model_dump())

    @app.post(path("estimate_benchmark"), response_model=m.BenchmarkEstimate, tags=["benchmarks"])
    def estimate_benchmark(body: m.BenchmarkInput):
        return call("estimate_benchmark", **body.model_dump())

    @app.get(path("audit_lookahead"), response_model=m.LookaheadOutput, tags=["audit"])
    def audit_lookahead(target: m.SessionId):
        return call("audit_lookahead", target=target)

    @app.get(path("list_tasks"), response_model=m.TasksOutput, tags=["tasks"])
    def list_tasks(q: Annotated[m.ListTasksInput, Query()]):
        return call("list_tasks", **q.model_dump())

    @app.get(path("task_status"), response_model=m.TaskView, tags=["tasks"])
    def task_status(task_id: m.TaskId):
        return call("task_status", task_id=task_id)

    @app.delete(path("cancel_task"), response_model=m.TaskView, tags=["tasks"])
    def cancel_task(task_id: m.TaskId):
        return call("cancel_task", task_id=task_id)

    @app.post(path("resume_task"), response_model=m.TaskView, status_code=202, tags=["tasks"])
    def resume_task(task_id: m.TaskId):
        return call("resume_task", task_id=task_id)

    @app.get(path("task_artifacts"), response_model=m.ArtifactsOutput, tags=["tasks"])
    def task_artifacts(task_id: m.TaskId):
        return call("task_artifacts", task_id=task_id)

    @app.get(path("task_artifacts") + "/{name}", tags=["tasks"], response_class=FileResponse,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def task_artifact_file(task_id: m.TaskId, name: m.ArtifactName):
        found = {a.name: a for a in call("task_artifacts", task_id=task_id).artifacts}
        if name not in found:
            raise NotFound(f"task {task_id} has no artifact '{name}' (has: {', '.join(found) or 'none'})",
                           field="name")
        return FileResponse(found[name].path, media_type=found[name].media_type, filename=name)

    @app.get(TASK_EVENTS, tags=["tasks"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "`progress` events (a TaskView each), then one `end` event"}})
    def task_events(task_id: m.TaskId):
        call("task_status", task_id=task_id)  # a 404 before the stream opens, not inside it

        def stream():
            try:
                for v in kernel.watch(task_id):
                    yield f"event: {'end' if v.status in TERMINAL else 'progress'}\ndata: {v.model_dump_json()}\n\n"
            except KernelError as e:
                yield f"event: error\ndata: {json.dumps(e.to_dict())}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app


def asgi_app(kernel: Kernel):
    """The app as served: behind the bearer check when a token is configured."""
    policy = kernel.policies[TRANSPORT]
    app = create_app(kernel)
    return BearerAuth(app, policy) if policy.token else app


# how long a stopping server waits for requests still running: one waiting on a store that is gone (pymongo's
# server selection, 5 s; a hung server's socket, 30 s) would otherwise hold the stop for as long. A request cut off
# here ends like a crash: its audit so far is stored or spooled, a half-done fill completed on the next connect
SHUTDOWN_GRACE_S = 1.0


def exit_cleanly_on_sigterm() -> None:
    """uvicorn re-raises SIGTERM once it has shut down; with the default handler the process would die
    there, before closing the store, and leak the embedded server it started. Exit through Python instead."""
    import signal
    import sys
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def serve(host: str = "127.0.0.1", port: int = 8000, *, db: Optional[str] = None,
          kernel: Optional[Kernel] = None, log_level: str = "info") -> None:
    """Refuses a non-loopback host without TRADEGRAPH_API_TOKEN before opening the store."""
    import uvicorn

    check_bind(host, Policy.for_transport(TRANSPORT))
    exit_cleanly_on_sigterm()
    kernel = kernel or Kernel.open(db)
    try:
        uvicorn.run(asgi_app(kernel), host=host, port=port, log_level=log_level,
                    timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    finally:
        kernel.close()
