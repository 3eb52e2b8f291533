"""The web console in a real browser: Debian's chromium driven by Playwright, against `tradegraph serve`'s app on a
real server. A person approves a paused cycle and sees the fill; a second tab's stale Approve is refused with the
reason; markup in a headline and a name is text; a form posted from another origin or without the CSRF token is
refused; a backtest started from the page streams its progress and draws its chart; every page of a 20-symbol
StockBench cycle renders without a console error or horizontal scrolling."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from database.connection import connect
from graph.kernel.core import Kernel
from tests.console.server import HOSTILE, browser, hostile_news, paused_cycle, serving, skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(
        connect(f"mongomock://console_browser_{uuid.uuid4().hex[:10]}"),
        experiments_dir=tmp_path_factory.mktemp("experiments"),
        env={"TRADEGRAPH_ALLOW_EXECUTION": "http"},
    )
    yield k
    k.close()


@pytest.fixture(scope="module")
def base(kernel):
    with serving(kernel) as url:
        yield url


@pytest.fixture(scope="module")
def chrome():
    with browser() as b:
        yield b


def _status(kernel: Kernel, session_id: str) -> str:
    replay: Any = kernel.call("replay", {"session_id": session_id})
    return replay.cycles[-1]["status"]


def _watched(page) -> list[str]:
    """Every console error and uncaught exception of the page, as they happen."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return problems


def test_approve_from_the_page_shows_the_fill_and_a_stale_tab_is_refused(kernel, base, chrome):
    sid = paused_cycle(kernel).session_id
    url = f"{base}/ui/sessions/{sid}/cycles/1"
    ctx = chrome.new_context(viewport={"width": 1280, "height": 900})
    first, second = ctx.new_page(), ctx.new_page()
    problems = _watched(first) + _watched(second)
    for p in (first, second):
        p.goto(url)
        assert p.locator("#decision").is_visible() and p.locator("tr.fill").count() == 0
    # by keyboard alone: the name, then Tab to Approve and Enter
    first.focus("#by")
    first.keyboard.type("alice")
    for _ in range(6):
        first.keyboard.press("Tab")
        if first.evaluate("document.activeElement.className") == "approve":
            break
    assert first.evaluate("document.activeElement.textContent") == "Approve"
    first.keyboard.press("Enter")
    first.wait_for_selector("#decided")
    assert first.locator("tr.fill").count() == 2  # AAPL and MSFT bought
    assert "filled" in first.inner_text("#execution-status")
    assert "Approved by alice (console) (via http)" in first.inner_text("#approval")
    assert _status(kernel, sid) == "completed"

    problems.clear()  # the refusal below is a 409, as it should be
    second.fill("#by", "bob")
    second.click("button.approve")
    refusal = second.wait_for_selector("#refusal").inner_text()
    assert "was decided elsewhere: approved by alice (console)" in refusal and "it ended completed" in refusal
    assert second.locator("#decision").count() == 0  # the page now shows the decided cycle
    assert second.locator("tr.fill").count() == 2  # and its fills: nothing executed twice
    assert [p for p in problems if "409" not in p] == []
    ctx.close()


def test_a_hostile_headline_and_name_render_as_text(kernel, base, chrome, tmp_path):
    out = paused_cycle(kernel, symbols=("AAPL",), news=str(hostile_news(tmp_path)))
    kernel.call("approve", {"session_id": out.session_id, "approved": False, "by": HOSTILE})
    replay: Any = kernel.call("replay", {"session_id": out.session_id})
    stored = replay.cycles[0]["contracts"]["SCANNING"]["data"]["snapshots"][0]["bundle"]["news"]["items"][0]
    page = chrome.new_page()
    problems = _watched(page)
    page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
    for path in ("", "/cycles/1", "/cycles/1/log"):
        page.goto(f"{base}/ui/sessions/{out.session_id}{path}")
        assert page.evaluate("window.__pwned") is None, path
        assert page.locator("main script, main img[src='x'], main b").count() == 0, path
    page.goto(f"{base}/ui/sessions/{out.session_id}/cycles/1")
    assert page.inner_text(".headline") == stored["headline"]
    assert page.inner_text("#approval") == f"Rejected by {HOSTILE}."
    assert problems == []
    page.close()


def test_a_form_from_another_origin_or_without_the_csrf_token_is_refused(kernel, base, chrome):
    sid = paused_cycle(kernel).session_id
    action = f"{base}/ui/sessions/{sid}/cycles/1/decision"
    page = chrome.new_page()
    page.goto(f"{base}/ui/sessions/{sid}/cycles/1")  # this browser holds the console's cookies
    # a page on another site posting the same form, CSRF token copied in and all
    token = page.get_attribute("input[name=csrf]", "value")
    evil = (
        f'<form id="f" method="post" action="{action}"><input name="csrf" value="{token}">'
        '<input name="decision" value="approve"><input name="by" value="mallory"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    page.route("http://evil.test/**", lambda route: route.fulfill(status=200, content_type="text/html", body=evil))
    with page.expect_response(action) as answer:
        page.goto("http://evil.test/")
    assert answer.value.status == 403
    assert "not this server's own" in page.content()
    # this origin, without the token
    page.goto(f"{base}/ui/sessions/{sid}/cycles/1")
    status = page.evaluate(
        """async (url) => (await fetch(url, {method: 'POST', headers: {'Content-Type':
        'application/x-www-form-urlencoded'}, body: 'decision=approve&by=mallory'})).status""",
        action,
    )
    assert status == 403
    # the control: the same fetch with the page's token is accepted, so the refusals above were the checks'
    ok = page.evaluate(
        """async ([url, t]) => (await fetch(url, {method: 'POST', redirect: 'manual', headers:
        {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'decision=reject&by=me&csrf=' + t})).type""",
        [action, token],
    )
    assert ok == "opaqueredirect"  # the 303 to the decided page
    assert _status(kernel, sid) == "rejected"
    page.close()


def test_a_backtest_started_from_the_page_shows_progress_and_its_chart(kernel, base, chrome):
    page = chrome.new_page(viewport={"width": 1280, "height": 900})
    problems = _watched(page)
    # every text the progress line shows, kept across the reload at the end
    page.add_init_script("""document.addEventListener('DOMContentLoaded', () => {
        const el = document.getElementById('progress-text'); if (!el) return;
        new MutationObserver(() => { const seen = JSON.parse(sessionStorage.getItem('seen') || '[]');
            seen.push(el.textContent); sessionStorage.setItem('seen', JSON.stringify(seen)); })
            .observe(el, {childList: true, characterData: true, subtree: true}); });""")
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if r.url.endswith("/events") else None)
    page.goto(f"{base}/ui/runs")
    page.fill("#symbols", "AAPL,MSFT")
    page.fill("#start", "2012-06-01")
    page.fill("#end", "2012-06-29")
    page.fill("#every", "5")
    page.click("#start-h ~ form button[type=submit]")
    page.wait_for_url(f"{base}/ui/runs/t-*")
    page.wait_for_selector("svg.chart", timeout=180_000)
    seen = page.evaluate("JSON.parse(sessionStorage.getItem('seen') || '[]')")
    assert streams and seen, "the page never showed a progress event"
    assert page.inner_text("#progress-text").startswith("5/5 points")
    assert page.locator("svg.chart polyline").count() == 4  # equity and drawdown, each beside buy & hold
    assert page.locator("img.artifact[alt='equity.png']").evaluate("i => i.naturalWidth") > 0
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
    assert problems == []
    page.close()


@pytest.mark.slow
def test_every_page_of_a_20_symbol_stockbench_cycle_renders_cleanly(kernel, base, chrome):
    task: Any = kernel.call("start_benchmark", {"start": "2025-03-03", "end": "2025-03-03"})
    *_, last = kernel.watch(task.task_id)
    assert last.status == "succeeded", last.error
    sessions: Any = kernel.call("list_sessions", {"limit": 5})
    sid = next(s.session_id for s in sessions.sessions if len(s.symbols) == 20)
    replay: Any = kernel.call("replay", {"session_id": sid})
    checks = replay.cycles[0]["contracts"]["VALIDATING"]["data"]["checks"]
    pages = [
        "/",
        f"/ui/sessions/{sid}",
        f"/ui/sessions/{sid}/cycles/1",
        f"/ui/sessions/{sid}/cycles/1/log",
        "/ui/runs",
        f"/ui/runs/{task.task_id}",
    ]
    for width in (1280, 390):
        page = chrome.new_page(viewport={"width": width, "height": 900})
        problems = _watched(page)
        for path in pages:
            page.goto(base + path)
            assert page.locator("h1").count() == 1, path
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px"
        page.goto(f"{base}/ui/sessions/{sid}/cycles/1")
        assert page.locator("details.bundle").count() == 20
        assert page.locator("#risk-h ~ table tbody tr").count() == len(checks) > 0  # every check, none dropped
        assert problems == [], problems
        page.close()


def test_with_a_token_the_browser_signs_in_once_and_page_scripts_cannot_read_the_cookie(tmp_path, chrome):
    k = Kernel(
        connect(f"mongomock://console_token_{uuid.uuid4().hex[:10]}"),
        experiments_dir=tmp_path / "exp",
        env={"TRADEGRAPH_API_TOKEN": "browser-token"},
    )
    try:
        with serving(k) as url:
            ctx = chrome.new_context()
            page = ctx.new_page()
            problems = _watched(page)
            page.goto(f"{url}/ui/runs")
            assert page.url == f"{url}/ui/login?next=/ui/runs"
            page.fill("#token", "browser-token")
            page.press("#token", "Enter")
            page.wait_for_url(f"{url}/ui/runs")
            assert page.locator("h1").inner_text() == "Runs"
            page.goto(f"{url}/")  # once: the next page needs no token
            assert page.locator("h1").inner_text() == "Sessions"
            assert "tg_console" not in page.evaluate("document.cookie")  # HttpOnly
            cookie = next(c for c in ctx.cookies() if c["name"] == "tg_console")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != "browser-token"
            # the cookie opens the console, not the API
            assert page.evaluate("async () => (await fetch('/sessions')).status") == 401
            problems.clear()
            ctx.close()
    finally:
        k.close()
