"""The replay page renders in a real browser (headless Chromium): the DOM has the overview, the
timeline, one panel per state and the <details>, and a screenshot is drawn."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from database.connection import connect
from graph.machine.runner import run_state_machine
from graph.machine.state import CONTRACT_KEYS
from graph.services.replay.html import render_html
from graph.services.replay.session import load_session_log

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, str]:
    store = connect(f"mongomock://browser_{uuid.uuid4().hex[:10]}")
    try:
        first = run_state_machine("AAPL,MSFT", "2012-06-01", store=store)
        run_state_machine("AAPL,MSFT", "2012-06-04", store=store, session_id=first.session_id)
        html = render_html(load_session_log(store, first.session_id))
    finally:
        store.close()
    path = tmp_path_factory.mktemp("replay") / "session.html"
    path.write_text(html, encoding="utf-8")
    return path, first.session_id


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_dom_in_headless_chromium(page, tmp_path):
    path, sid = page
    r = _chromium(tmp_path / "profile", "--dump-dom", path.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert f"tradegraph session {sid}" in dom
    assert 'class="overview"' in dom and "BUY" in dom
    assert dom.count('class="timeline"') == 2  # one per cycle
    for n in (1, 2):
        for state in CONTRACT_KEYS:
            assert f'id="{sid}:c{n}-{state}"' in dom, (n, state)
    assert dom.count("<details") > 50
    for contract in (
        "MarketScan",
        "Plan",
        "QuantReport",
        "DebateReport",
        "PortfolioDecision",
        "DecisionValidation",
        "ExecutionResult",
        "AgentMemory",
    ):
        assert dom.count(f"<summary>contract <b>{contract}</b>") == 2, contract
    assert "MEMORIZING → END" in dom
    # the filter box and expand/collapse buttons survived parsing (inline JS, no external resource)
    assert 'id="filter"' in dom and "expand all" in dom


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_screenshot_in_headless_chromium(page, tmp_path):
    path, _sid = page
    png = tmp_path / "replay.png"
    r = _chromium(
        tmp_path / "profile", f"--screenshot={png}", "--window-size=1280,2000", "--hide-scrollbars", path.as_uri()
    )
    assert r.returncode == 0, r.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a drawn page, not a blank one
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2000)
