"""The console's routes: each page renders a view (graph/transports/web/views.py) through a template; each
state-changing form is checked (CSRF and Origin) before it reaches the kernel, which applies the HTTP transport's
policies as it does for the API."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from jinja2 import Environment, PackageLoader, Undefined, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles

from graph.kernel.core import Kernel
from graph.kernel.errors import KernelError, NotFound, http_status
from graph.kernel.idempotent import caller_of_token
from graph.kernel.models import ApproveInput
from graph.kernel.tasks import TERMINAL
from graph.services.run_files import UnsafeRunPath, iter_run_file
from graph.transports.web import views
from graph.transports.web.format import FILTERS
from graph.transports.web.guard import LOGIN
from graph.transports.web.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    PREFIX,
    SESSION_COOKIE,
    Csrf,
    Refused,
    cookie_options,
    origin_refused,
    session_value,
)

HERE = Path(__file__).parent
# what the console writes into the audit for who decided: the name the person gives, and where they decided
CONSOLE = "console"
# a decision's comment goes into the audit only where the kernel's approval input takes one; the form asks for
# one only then (never a field whose text is dropped)
COMMENTS = "comment" in ApproveInput.model_fields


def environment() -> Environment:
    # autoescape everything, whatever the file name: model and news text is never markup
    env = Environment(
        loader=PackageLoader("graph.transports.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # a field a contract of an older version lacks reads as missing (—), never as a crashed page
    env.filters.update({name: _undefined_as_none(f) for name, f in FILTERS.items()})
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=1, default=str, ensure_ascii=False)
    env.globals.update(PREFIX=PREFIX, STATES=views.STATES, COMMENTS=COMMENTS, BROKER=views.broker_available())
    return env


def _undefined_as_none(f: Callable[..., str]) -> Callable[..., str]:
    def filtered(v: Any, *args: Any) -> str:
        return f(None if isinstance(v, Undefined) else v, *args)

    return filtered


async def form_of(request: Request) -> dict[str, str]:
    """An url-encoded form's fields (the console's forms send nothing else)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def mount(app: FastAPI, kernel: Kernel) -> None:
    """The console's pages on the API's app: `/` and `/ui/...`, left out of the OpenAPI document."""
    env, csrf, cycles = environment(), Csrf(), views.CycleCache()
    policy = kernel.policies[views.TRANSPORT]
    router = APIRouter(include_in_schema=False)

    def render(request: Request, template: str, code: int = 200, **ctx: Any) -> HTMLResponse:
        cookie = request.cookies.get(CSRF_COOKIE) or Csrf.new_cookie()
        html = env.get_template(template).render(
            request=request,
            csrf_field=CSRF_FIELD,
            csrf=csrf.field_for(cookie),
            token_set=policy.token is not None,
            **ctx,
        )
        resp = HTMLResponse(
            html,
            status_code=code,
            headers={
                # nothing but this server: no CDN, no inline script an injected string could become
                "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "same-origin",
                "Cache-Control": "no-store",
            },
        )
        if request.cookies.get(CSRF_COOKIE) != cookie:
            resp.set_cookie(CSRF_COOKIE, cookie, **cookie_options(request))
        return resp

    def failure(request: Request, err: KernelError | Refused) -> HTMLResponse:
        status = err.status if isinstance(err, Refused) else http_status(err)
        return render(request, "error.html", code=status, message=err.message, kind=getattr(err, "kind", "refused"))

    async def show(
        request: Request, template: str, build: Callable[[], dict[str, Any]], code: int = 200, **extra: Any
    ) -> HTMLResponse:
        try:
            data = await run_in_threadpool(build)
        except KernelError as e:
            return failure(request, e)
        return render(request, template, code=code, **data, **extra)

    async def checked_form(request: Request) -> dict[str, str]:
        fields = await form_of(request)
        csrf.check(request, fields.get(CSRF_FIELD))
        return fields

    # ------------------------------------------------------------------ sessions
    @router.get("/", response_class=HTMLResponse)
    async def sessions(request: Request, kind: str = "", status: str = "", page: int = 1, deleted: str = ""):
        return await show(
            request,
            "sessions.html",
            lambda: views.sessions_page(kernel, kind or None, status or None, page),
            deleted=deleted,
        )

    @router.get(PREFIX + "/sessions/{session_id}", response_class=HTMLResponse)
    async def session(request: Request, session_id: str):
        return await show(request, "session.html", lambda: views.session_page(kernel, session_id), refusal=None)

    @router.post(PREFIX + "/sessions/{session_id}/delete", response_class=HTMLResponse)
    async def delete(request: Request, session_id: str):
        """Delete the session as `tradegraph sessions delete` does, under the same policy
        (TRADEGRAPH_ALLOW_DELETE), recorded in the admin log with the name given; the person types the session's id
        to confirm."""
        try:
            fields = await checked_form(request)
            name = (fields.get("by") or "").strip()
            if not name:
                raise Refused(422, "refused: say who deletes (the admin log records it)")
            if fields.get("confirm", "").strip() != session_id:
                raise Refused(422, f"refused: type the session's id ({session_id}) to confirm the deletion")
            out: Any = await run_in_threadpool(
                kernel.call,
                "delete_session",
                {"session_id": session_id, "by": f"{name[:80]} ({CONSOLE})", "force": fields.get("force") == "yes"},
                transport=views.TRANSPORT,
            )
        except (Refused, KernelError) as e:
            status = e.status if isinstance(e, Refused) else http_status(e)
            if isinstance(e, Refused) and status == 403:
                return failure(request, e)
            return await show(
                request, "session.html", lambda: views.session_page(kernel, session_id), code=status, refusal=e.message
            )
        gone = ", ".join(d.session_id for d in out.sessions)
        return RedirectResponse(f"/?deleted={quote(gone)}", status_code=303)

    @router.get(PREFIX + "/sessions/{session_id}/cycles/{index}", response_class=HTMLResponse)
    async def cycle(request: Request, session_id: str, index: int, decided: str = ""):
        return await show(
            request,
            "cycle.html",
            lambda: views.cycle_page(kernel, session_id, index, cycles),
            decided=decided,
            refusal=None,
        )

    @router.post(PREFIX + "/sessions/{session_id}/cycles/{index}/decision", response_class=HTMLResponse)
    async def decide(request: Request, session_id: str, index: int):
        try:
            fields = await checked_form(request)
            approved = _decision(fields.get("decision"))
            name = (fields.get("by") or "").strip()
            if not name:
                raise Refused(422, "refused: say who decides (the audit records it)")
            comment = (fields.get("comment") or "").strip() or None
            await run_in_threadpool(_approve, kernel, session_id, index, approved, f"{name[:80]} ({CONSOLE})", comment)
        except (Refused, KernelError) as e:
            status = e.status if isinstance(e, Refused) else http_status(e)
            if status == 403 and isinstance(e, Refused):
                return failure(request, e)
            return await show(
                request,
                "cycle.html",
                lambda: views.cycle_page(kernel, session_id, index, cycles),
                code=status,
                decided="",
                refusal=e.message,
            )
        return RedirectResponse(
            f"{PREFIX}/sessions/{session_id}/cycles/{index}?decided={'approved' if approved else 'rejected'}",
            status_code=303,
        )

    @router.get(PREFIX + "/sessions/{session_id}/cycles/{index}/log", response_class=HTMLResponse)
    async def log(request: Request, session_id: str, index: int):
        return await show(request, "log.html", lambda: views.log_page(kernel, session_id, index, cycles), verified=None)

    @router.post(PREFIX + "/sessions/{session_id}/cycles/{index}/verify", response_class=HTMLResponse)
    async def verify(request: Request, session_id: str, index: int):
        try:
            await checked_form(request)
        except Refused as e:
            return failure(request, e)

        def both() -> dict[str, Any]:
            report = views.call(kernel, "verify", session_id=session_id).model_dump()
            return {**views.log_page(kernel, session_id, index, cycles), "verified": report}

        return await show(request, "log.html", both)

    # ------------------------------------------------------------------ runs
    @router.get(PREFIX + "/runs", response_class=HTMLResponse)
    async def runs(request: Request):
        return await show(
            request, "runs.html", lambda: views.runs_page(kernel), form={}, error=None, form_key=uuid.uuid4().hex
        )

    @router.post(PREFIX + "/runs/backtest", response_class=HTMLResponse)
    async def start_backtest(request: Request):
        try:
            fields = await checked_form(request)
        except Refused as e:
            return failure(request, e)
        args = _backtest_args(fields)
        try:
            task: Any = await run_in_threadpool(
                kernel.call_keyed,
                "start_backtest",
                args,
                transport=views.TRANSPORT,
                idempotency_key=fields.get("key") or None,
                caller=caller_of_token(request.headers.get("authorization")) or request.cookies.get(SESSION_COOKIE),
            )
        except KernelError as e:  # bad input named by the kernel's own model, as the API would say it
            return await show(
                request,
                "runs.html",
                lambda: views.runs_page(kernel),
                code=http_status(e),
                form=fields,
                error=e.message,
                form_key=uuid.uuid4().hex,
            )
        return RedirectResponse(f"{PREFIX}/runs/{task.task_id}", status_code=303)

    @router.get(PREFIX + "/runs/{task_id}", response_class=HTMLResponse)
    async def run(request: Request, task_id: str):
        return await show(request, "run.html", lambda: views.run_page(kernel, task_id))

    @router.get(PREFIX + "/runs/{task_id}/events")
    def run_events(task_id: str):
        # the API's progress stream (graph/transports/http.py task_events), here behind the console's cookie
        try:
            views.call(kernel, "task_status", task_id=task_id)
        except KernelError as e:
            return Response(e.message, status_code=http_status(e), media_type="text/plain")

        def stream():
            try:
                v: Any
                for v in kernel.watch(task_id):  # a TaskView each
                    yield f"event: {'end' if v.status in TERMINAL else 'progress'}\ndata: {v.model_dump_json()}\n\n"
            except KernelError as e:
                yield f"event: error\ndata: {json.dumps(e.to_dict())}\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    @router.get(PREFIX + "/runs/{task_id}/files/{name}")
    def run_file(task_id: str, name: str):
        try:
            found = {a.name: a for a in views.call(kernel, "task_artifacts", task_id=task_id).artifacts}
            if name not in found:
                raise NotFound(f"task {task_id} has no file '{name}'", field="name")
        except KernelError as e:
            return Response(e.message, status_code=http_status(e), media_type="text/plain")
        try:  # as the API serves it (graph/transports/http.py): opened without following a link
            size, chunks = iter_run_file(found[name].path)
        except UnsafeRunPath as e:
            return Response(str(e), status_code=422, media_type="text/plain")
        # shown inline only as an image; anything else downloads (a JSON file is never rendered as a page)
        disposition = "inline" if found[name].media_type == "image/png" else "attachment"
        return StreamingResponse(
            chunks,
            media_type=found[name].media_type,
            headers={
                "Content-Disposition": f'{disposition}; filename="{name}"',
                "Content-Length": str(size),
                "X-Content-Type-Options": "nosniff",
            },
        )

    # ------------------------------------------------------------------ broker
    @router.get(PREFIX + "/broker", response_class=HTMLResponse)
    async def broker(request: Request):
        return await show(request, "broker.html", lambda: views.broker_page(kernel), reconciled=None, refusal=None)

    @router.post(PREFIX + "/broker/{action}", response_class=HTMLResponse)
    async def broker_action(request: Request, action: str):
        """Halt, resume (under the execution policy, audited with the name given) or reconcile."""
        try:
            fields = await checked_form(request)
            if action not in ("halt", "resume", "reconcile"):
                raise Refused(404, f"refused: no broker action {action!r} (halt, resume, reconcile)")
            name = (fields.get("by") or "").strip()
            if action != "reconcile" and not name:
                raise Refused(422, f"refused: say who {action}s the broker (the audit records it)")
            args: dict[str, Any] = (
                {}
                if action == "reconcile"
                else {"by": f"{name[:80]} ({CONSOLE})", "reason": (fields.get("reason") or "")[:500]}
            )
            if action == "halt":
                args["cancel_open"] = fields.get("cancel_open") == "yes"
            out: Any = await run_in_threadpool(kernel.call, f"broker_{action}", args, transport=views.TRANSPORT)
        except (Refused, KernelError) as e:
            status = e.status if isinstance(e, Refused) else http_status(e)
            if isinstance(e, Refused) and status in (403, 404):
                return failure(request, e)
            return await show(
                request,
                "broker.html",
                lambda: views.broker_page(kernel),
                code=status,
                reconciled=None,
                refusal=e.message,
            )
        if action == "reconcile":
            return await show(
                request, "broker.html", lambda: views.broker_page(kernel), reconciled=out.model_dump(), refusal=None
            )
        return RedirectResponse(f"{PREFIX}/broker", status_code=303)

    # ------------------------------------------------------------------ sign-in
    @router.get(LOGIN, response_class=HTMLResponse)
    async def login(request: Request, next: str = "/"):
        return render(request, "login.html", next=_local(next), error=None)

    @router.post(LOGIN, response_class=HTMLResponse)
    async def login_post(request: Request):
        fields = await form_of(request)
        refusal = origin_refused(request)
        if refusal:
            return failure(request, Refused(403, refusal))
        if policy.token is None:
            return RedirectResponse(_local(fields.get("next", "/")), status_code=303)
        if not policy.authorized(f"Bearer {fields.get('token', '')}"):
            return render(request, "login.html", code=401, next=_local(fields.get("next", "/")), error="wrong token")
        resp = RedirectResponse(_local(fields.get("next", "/")), status_code=303)
        resp.set_cookie(SESSION_COOKIE, session_value(policy.token), **cookie_options(request))
        return resp

    @router.post(PREFIX + "/logout")
    async def logout(request: Request):
        try:
            await checked_form(request)
        except Refused as e:
            return failure(request, e)
        resp = RedirectResponse(LOGIN, status_code=303)
        resp.delete_cookie(SESSION_COOKIE, path="/")
        return resp

    app.include_router(router)
    app.mount(PREFIX + "/static", StaticFiles(directory=HERE / "static"), name="console-static")


def _decision(value: Optional[str]) -> bool:
    if value not in ("approve", "reject"):
        raise Refused(422, f"refused: decision {value!r} is neither approve nor reject")
    return value == "approve"


def _approve(kernel: Kernel, session_id: str, index: int, approved: bool, by: str, comment: Optional[str]) -> None:
    """Decide the cycle this page showed, and only it: a page left open while the cycle was decided elsewhere (or
    while a later cycle paused) is refused with the reason, never applied to another cycle."""
    shown = views.load_cycle(kernel, session_id, index)
    if not shown.paused:
        who = shown.approval or {}
        how = (
            f"{'approved' if who.get('approved') else 'rejected'} by {who.get('by')}"
            if who
            else "not waiting for a decision"
        )
        raise Refused(409, f"refused: cycle {shown.cycle_id} was decided elsewhere: {how}; it ended {shown.status}")
    args: dict[str, Any] = {"session_id": session_id, "approved": approved, "by": by}
    if comment is not None and COMMENTS:
        args["comment"] = comment
    kernel.call("approve", args, transport=views.TRANSPORT)


def _backtest_args(fields: dict[str, str]) -> dict[str, Any]:
    """The form's text as the kernel's input: symbols split on commas, blanks left to the model's defaults. Every
    check is the kernel's (BacktestInput), so the page refuses what the API refuses, with the same line."""
    args: dict[str, Any] = {"symbols": [s.strip() for s in fields.get("symbols", "").split(",") if s.strip()]}
    for name in ("start", "end", "every", "capital", "memory"):
        if fields.get(name, "").strip():
            args[name] = fields[name].strip()
    return args


def _local(target: str) -> str:
    """Only a path on this server: `next` never sends the browser elsewhere."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"
