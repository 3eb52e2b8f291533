"""The web console without a browser (FastAPI's TestClient on the app as served): CSRF and Origin on every
state-changing form, the sign-in cookie of a token-protected server, the execution policy on approvals, markup in
model and news text shown as text, and the backtest form checked by the kernel's own model."""

from __future__ import annotations

import re
import uuid
from typing import Any, Optional

import pytest
from fastapi.testclient import TestClient

from database.connection import connect
from graph.kernel.core import Kernel
from graph.transports.http import asgi_app
from tests.console.server import HOSTILE, hostile_news, paused_cycle

BASE = "http://127.0.0.1:8000"
OWN = {"Origin": BASE}


def _kernel(tmp_path, **env: str) -> Kernel:
    return Kernel(connect(f"mongomock://console_{uuid.uuid4().hex[:10]}"), experiments_dir=tmp_path / "exp", env=env)


@pytest.fixture
def kernel(tmp_path):
    k = _kernel(tmp_path, TRADEGRAPH_ALLOW_EXECUTION="http")
    yield k
    k.close()


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _status(kernel: Kernel, session_id: str) -> str:
    replay: Any = kernel.call("replay", {"session_id": session_id})
    return replay.cycles[-1]["status"]


def _decide(client: TestClient, sid: str, csrf: str | None, headers: dict, decision: str = "approve"):
    data = {"decision": decision, "by": "alice"} | ({"csrf": csrf} if csrf is not None else {})
    return client.post(f"/ui/sessions/{sid}/cycles/1/decision", data=data, headers=headers, follow_redirects=False)


def test_approve_with_csrf_executes_and_a_second_decision_is_refused_with_the_reason(kernel):
    sid = paused_cycle(kernel).session_id
    c = TestClient(asgi_app(kernel), base_url=BASE)
    page = c.get(f"/ui/sessions/{sid}/cycles/1")
    assert page.status_code == 200 and "Waiting for a decision" in page.text
    r = _decide(c, sid, _csrf(page.text), OWN)
    assert r.status_code == 303, r.text
    after = c.get(r.headers["location"]).text
    assert 'class="fill"' in after and "Approved by alice (console) (via http)" in after
    assert _status(kernel, sid) == "completed"
    stale = _decide(c, sid, _csrf(page.text), OWN)  # the page as it was before the decision
    assert stale.status_code == 409
    assert "was decided elsewhere: approved by alice (console) (via http); it ended completed" in stale.text


@pytest.mark.parametrize("case", ["no token", "another browser's token", "no Origin", "another Origin", "Origin null"])
def test_a_decision_without_the_csrf_token_or_from_another_origin_is_refused(kernel, case):
    sid = paused_cycle(kernel).session_id
    c = TestClient(asgi_app(kernel), base_url=BASE)
    token = _csrf(c.get(f"/ui/sessions/{sid}/cycles/1").text)
    headers, csrf = dict(OWN), token
    csrf_sent: Optional[str] = csrf
    if case == "no token":
        csrf_sent = None
    elif case == "another browser's token":
        other = TestClient(asgi_app(kernel), base_url=BASE)
        csrf_sent = _csrf(other.get(f"/ui/sessions/{sid}/cycles/1").text)
    elif case == "no Origin":
        headers = {}
    elif case == "another Origin":
        headers = {"Origin": "http://evil.example"}
    else:
        headers = {"Origin": "null"}
    r = _decide(c, sid, csrf_sent, headers)
    assert r.status_code == 403, r.text
    assert "refused" in r.text
    assert _status(kernel, sid) == "pending_approval"  # nothing decided, nothing executed


def test_approve_follows_the_execution_policy_and_reject_does_not_need_it(tmp_path):
    k = _kernel(tmp_path)  # TRADEGRAPH_ALLOW_EXECUTION unset: http may not move the book
    try:
        sid = paused_cycle(k).session_id
        c = TestClient(asgi_app(k), base_url=BASE)
        csrf = _csrf(c.get(f"/ui/sessions/{sid}/cycles/1").text)
        r = _decide(c, sid, csrf, OWN)
        assert r.status_code == 403 and "TRADEGRAPH_ALLOW_EXECUTION=http" in r.text
        assert _status(k, sid) == "pending_approval"
        assert _decide(c, sid, csrf, OWN, "reject").status_code == 303
        assert _status(k, sid) == "rejected"
    finally:
        k.close()


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")


def test_markup_from_a_feed_and_from_a_person_is_shown_as_text(kernel, tmp_path):
    """The news reader already turns a headline's angle brackets into look-alikes, so the markup that reaches the
    pages raw here is the approver's name (any caller of approve names itself); the headline is shown as stored."""
    out = paused_cycle(kernel, symbols=("AAPL",), news=str(hostile_news(tmp_path)))
    kernel.call("approve", {"session_id": out.session_id, "approved": False, "by": HOSTILE})
    replay: Any = kernel.call("replay", {"session_id": out.session_id})
    stored = replay.cycles[0]["contracts"]["SCANNING"]["data"]
    headline = stored["snapshots"][0]["bundle"]["news"]["items"][0]["headline"]
    c = TestClient(asgi_app(kernel), base_url=BASE)
    for path in (
        f"/ui/sessions/{out.session_id}",
        f"/ui/sessions/{out.session_id}/cycles/1",
        f"/ui/sessions/{out.session_id}/cycles/1/log",
    ):
        html = c.get(path).text
        assert "<script>window.__pwned" not in html and "<img src=x" not in html, path
        assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html, path
    cycle = c.get(f"/ui/sessions/{out.session_id}/cycles/1")
    assert _escaped(headline) in cycle.text
    assert "script-src 'self'" in cycle.headers["content-security-policy"]  # no inline script would run anyway


def test_every_template_escapes_what_it_is_given():
    """The same markup handed to the templates raw (a feed without the news reader's guard): escaped."""
    from graph.transports.web.pages import environment

    note = {
        "analyst": "news",
        "stance": 0.5,
        "confidence": 0.4,
        "summary": HOSTILE,
        "key_points": [HOSTILE],
        "model_used": "m",
        "abstained": False,
    }
    html = (
        environment()
        .get_template("cycle.html")
        .render(
            session_id="s",
            index=1,
            cycle={"events": 1, "states": [], "contracts": {}},
            status="completed",
            paused=False,
            inputs={"symbols": ["AAPL"]},
            approval={"approved": True, "by": HOSTILE},
            bundles=[
                {
                    "symbol": "AAPL",
                    "price": 1.0,
                    "numbers": [],
                    "news": [
                        {"published_at": "2012-05-30", "event_class": "other", "sentiment": 0.1, "headline": HOSTILE}
                    ],
                    "net_sentiment": 0.1,
                    "fundamentals": {},
                    "forecast": None,
                }
            ],
            panels=[{"symbol": "AAPL", "notes": [note]}],
            debate=[],
            orders=[],
            validation=None,
            execution=None,
            exits=[],
            errors=[],
            memorizing=None,
            spend={},
            deciding_rationale=HOSTILE,
            decided="",
            refusal=HOSTILE,
            csrf_field="csrf",
            csrf="x",
            token_set=False,
        )
    )
    assert "<script>" not in html and "<img src=x" not in html and "<b>beats" not in html
    assert html.count(_escaped(HOSTILE)) == 6  # headline, summary, key point, approver, rationale, refusal


def test_with_a_token_the_console_asks_for_it_once_and_keeps_a_hash_in_a_strict_cookie(tmp_path):
    k = _kernel(tmp_path, TRADEGRAPH_API_TOKEN="s3cret-token")
    try:
        c = TestClient(asgi_app(k), base_url=BASE)
        r = c.get("/", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=/"
        assert c.post("/ui/runs/backtest", data={}, headers=OWN).status_code == 401
        wrong = c.post("/ui/login", data={"token": "nope", "next": "/"}, headers=OWN, follow_redirects=False)
        assert wrong.status_code == 401 and "wrong token" in wrong.text
        assert (
            c.post(
                "/ui/login",
                data={"token": "s3cret-token"},
                headers={"Origin": "http://evil.example"},
                follow_redirects=False,
            ).status_code
            == 403
        )
        ok = c.post(
            "/ui/login", data={"token": "s3cret-token", "next": "//evil.example/"}, headers=OWN, follow_redirects=False
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/"  # never sent off this server
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "s3cret-token" not in cookie
        assert c.get("/").status_code == 200
        # the cookie is the console's: the API still wants the bearer header
        assert c.get("/sessions").status_code == 401
        assert c.get("/sessions", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    finally:
        k.close()


def test_the_backtest_form_is_checked_by_the_kernels_model(kernel):
    c = TestClient(asgi_app(kernel), base_url=BASE)
    csrf = _csrf(c.get("/ui/runs").text)
    r = c.post(
        "/ui/runs/backtest",
        data={"csrf": csrf, "symbols": "AAPL", "start": "2012-06-01", "end": "not-a-day"},
        headers=OWN,
    )
    assert r.status_code == 422 and 'id="form-error"' in r.text and "end" in r.text
    assert kernel.call("list_tasks", {}).tasks == []  # nothing started


def test_sessions_are_filtered_and_the_pending_ones_come_first(kernel):
    paused = paused_cycle(kernel).session_id
    done = kernel.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01"}).session_id
    c = TestClient(asgi_app(kernel), base_url=BASE)
    html = c.get("/").text
    waiting = html.split('id="pending-h"')[1].split("</section>")[0]
    assert paused in waiting and done not in waiting
    only_completed = c.get("/?status=completed").text.split("<tbody>")[1]
    assert done in only_completed and paused not in only_completed
    # the capability filters (so the page reads only what it shows), on every transport alike
    listed: Any = kernel.call("list_sessions", {"status": "pending_approval", "kind": "run"})
    assert [s.session_id for s in listed.sessions] == [paused]
    assert kernel.call("list_sessions", {"kind": "backtest"}).sessions == []  # type: ignore[attr-defined]


def _delete(client: TestClient, sid: str, **extra: str):
    csrf = _csrf(client.get(f"/ui/sessions/{sid}").text)
    data = {"csrf": csrf, "by": "alice", "confirm": sid, "force": "yes"} | extra
    return client.post(f"/ui/sessions/{sid}/delete", data=data, headers=OWN, follow_redirects=False)


def test_deleting_follows_the_delete_policy_and_is_recorded_with_who(tmp_path):
    refused = _kernel(tmp_path, TRADEGRAPH_ALLOW_EXECUTION="http")  # TRADEGRAPH_ALLOW_DELETE unset
    try:
        sid = refused.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01"}).session_id
        r = _delete(TestClient(asgi_app(refused), base_url=BASE), sid)
        assert r.status_code == 403 and "TRADEGRAPH_ALLOW_DELETE=http" in r.text
        assert refused.store.events.exists(sid)
    finally:
        refused.close()
    k = _kernel(tmp_path, TRADEGRAPH_ALLOW_DELETE="http")
    try:
        sid = k.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01"}).session_id
        c = TestClient(asgi_app(k), base_url=BASE)
        assert c.get(f"/ui/sessions/{sid}/cycles/1").status_code == 200  # an ended cycle: kept after this view
        wrong = _delete(c, sid, confirm="not-it")
        assert wrong.status_code == 422 and "to confirm" in wrong.text and k.store.events.exists(sid)
        r = _delete(c, sid)
        assert r.status_code == 303 and r.headers["location"] == f"/?deleted={sid}"
        assert not k.store.events.exists(sid)
        assert [d["by"] for d in k.store.admin_log.records(sid) if d.get("phase") == "done"] == [
            "alice (console) (via http)"
        ]
        # the page kept from before is not served for a session that is gone
        assert c.get(f"/ui/sessions/{sid}/cycles/1").status_code == 404
    finally:
        k.close()


def test_the_broker_page_shows_the_account_and_halts_and_resumes_under_the_execution_policy(tmp_path, monkeypatch):
    pytest.importorskip("alpaca", reason="alpaca-py (the broker extra, in dev) is not installed")
    from tests.brokers.harness import guard_loopback, start_fake
    from tests.fakes.fake_alpaca import KEY, SECRET

    guard_loopback(monkeypatch)
    fake = start_fake()  # holds 10 MSFT at 30
    for k, v in {
        "TRADEGRAPH_BROKER": "alpaca",
        "ALPACA_API_KEY": KEY,
        "ALPACA_SECRET_KEY": SECRET,
        "ALPACA_BASE_URL": fake.url,
    }.items():
        monkeypatch.setenv(k, v)
    refused, k = _kernel(tmp_path), _kernel(tmp_path, TRADEGRAPH_ALLOW_EXECUTION="http")
    try:
        c = TestClient(asgi_app(refused), base_url=BASE)
        page = c.get("/ui/broker")
        assert page.status_code == 200 and 'href="/ui/broker"' in page.text
        assert "MSFT" in page.text.split('id="positions"')[1] and "Trading: not halted" in page.text
        r = c.post("/ui/broker/halt", data={"csrf": _csrf(page.text), "by": "alice"}, headers=OWN)
        assert r.status_code == 403 and "TRADEGRAPH_ALLOW_EXECUTION=http" in r.text
        c = TestClient(asgi_app(k), base_url=BASE)
        csrf = _csrf(c.get("/ui/broker").text)
        assert c.post("/ui/broker/halt", data={"by": "alice"}, headers=OWN).status_code == 403  # no CSRF token
        r = c.post("/ui/broker/halt", data={"csrf": csrf, "by": "alice", "reason": "<b>drill</b>"}, headers=OWN)
        assert r.status_code == 200 and "<strong>Halted</strong>" in r.text
        assert "halted by alice (console) (via http)" in r.text and "&lt;b&gt;drill&lt;/b&gt;" in r.text
        rec = c.post("/ui/broker/reconcile", data={"csrf": csrf}, headers=OWN)
        assert rec.status_code == 200 and 'id="reconciled"' in rec.text
        # the fake's 10 MSFT are in no ledger of this store: drift, named
        assert "1 drift(s)" in rec.text and "MSFT" in rec.text.split('id="drift"')[1].split("</ul>")[0]
        r = c.post("/ui/broker/resume", data={"csrf": csrf, "by": "bob"}, headers=OWN)
        assert "Trading: not halted" in r.text and "resumed by bob (console) (via http)" in r.text
    finally:
        refused.close()
        k.close()
        fake.stop()


def test_the_run_page_shows_a_scorecards_spread_significance_and_what_a_model_may_have_seen():
    """What the CLI's table says of a StockBench row, the console says too: a configuration's mean ± standard
    deviation over its runs, each run's paired test against buy-and-hold, a model that may have seen the window,
    failed points, and the sub-periods."""
    import copy
    import json
    from pathlib import Path

    from graph.services.benchmark.stockbench import rigour
    from graph.transports.web.pages import environment

    card = json.loads((Path(__file__).parents[2] / "docs/stockbench/offline-scorecard.json").read_text())
    shipped = card["rows"][0]
    runs = []
    for k, shift in enumerate((0.01, -0.02), 1):  # two runs of a sampling model around the shipped one
        run = copy.deepcopy(shipped)
        run.update(name=f"claude-sonnet-4-5 run {k}", cumulative_return=shipped["cumulative_return"] + shift)
        run.update(rigour.may_have_seen(["anthropic:claude-sonnet-4-5"], card["window"]["start"]))
        runs.append(run)
    runs[1]["failed_points"] = 2
    mean = {"name": "claude-sonnet-4-5 (mean of 2)", "kind": "run_mean", **rigour.spread(runs)}
    mean["may_have_seen_window"] = runs[0]["may_have_seen_window"]
    card["rows"] = runs + [mean] + card["rows"][1:]
    html = (
        environment()
        .get_template("run.html")
        .render(
            task={"task_id": "t", "kind": "benchmark", "status": "succeeded", "progress": {"done": 1, "total": 1}},
            scorecard=card,
            artifacts=[],
            images=[],
        )
    )
    table = html[html.index('id="scorecard"') : html.index("</table>", html.index('id="scorecard"'))]
    std = mean["cumulative_return_std"]
    assert std and f"± {std * 100:.2f}%" in table and "(n=2, mean ± standard deviation)" in table
    p = shipped["vs_buy_and_hold"]["p_value"]
    assert table.count(f"p = {p:.2f}") == 2  # each run's paired test (the mean row has none)
    seen = runs[0]["may_have_seen_window"]
    assert table.count("may have seen this window") == (3 if seen else 0) and "2 failed point(s)" in table
    assert seen is not False, "the flag has nothing to show: pick a model whose cut-off is on or after the window"
    assert "downturn (Mar-Apr) 2025-03-03..2025-04-30" in html

    # a scorecard is a file in a run folder: its names, departures and periods are text, never markup
    card["rows"][0]["name"] = HOSTILE
    card["departures"] = [HOSTILE]
    card["rows"][0]["sub_periods"] = {HOSTILE: shipped["sub_periods"]["downturn (Mar-Apr)"]}
    html = (
        environment()
        .get_template("run.html")
        .render(task={"task_id": "t", "kind": "benchmark", "status": "succeeded", "progress": {}}, scorecard=card)
    )
    assert (
        "<script>window" not in html and "<img src=x" not in html and html.count(_escaped(HOSTILE)) == 4
    )  # the name (its row, its periods), the departure, the period
