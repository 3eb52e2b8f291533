"""`tradegraph replay`: tables, --json, --html, --verify and exit codes, through the CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from database.connection import connect
from graph.machine.runner import run_state_machine
from graph.transports.cli.main import main
from tests.unit.test_replay import _short_manager, copy_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def recorded():
    uri = f"mongomock://cli_{uuid.uuid4().hex[:10]}"
    store = connect(uri)
    first = run_state_machine("AAPL,MSFT", "2012-06-01", store=store)
    run_state_machine("AAPL,MSFT", "2012-06-04", store=store, session_id=first.session_id)
    yield uri, store, first.session_id
    store.close()


def test_tables_json_html(recorded, capsys, tmp_path):
    uri, _store, sid = recorded
    assert main(["replay", sid, "--db", uri]) == 0
    out = capsys.readouterr().out
    assert "gap-free" in out and f"{sid}:c2" in out and "executed trades" in out
    assert "hash chain: intact" in out and out.count("ran with: offline offline-quick/offline-deep") == 2
    assert main(["replay", sid, "--db", uri, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["cycles"]) == 2 and data["gap_free"] and data["cycles"][0]["contracts"]["DEBATE"]
    chain = data["chain"]
    assert (chain["ok"], chain["checked"], chain["first_broken"]) == (True, data["events"], None)
    assert chain["head"]["seq"] == data["events"] and chain["after_head"] == 0
    assert data["cycles"][1]["inputs"]["as_of"] == "2012-06-04"
    page = tmp_path / "s.html"
    assert main(["replay", sid, "--db", uri, "--html", str(page)]) == 0
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<details" in html and "DEBATE" in html
    assert "hash chain <span class=ok>intact</span>" in html and "ran with: offline" in html
    # self-contained: no external stylesheet, script or link
    assert "src=" not in html and "<link" not in html and "href='http" not in html


def test_unknown_session_exits_2(recorded, capsys):
    uri, _store, _sid = recorded
    assert main(["replay", "nope", "--db", uri]) == 2
    assert main(["replay", "nope", "--db", uri, "--verify"]) == 2
    assert "unknown session" in capsys.readouterr().err


def test_seq_gap_is_shown(recorded, capsys):
    uri, store, sid = recorded
    copy_session(store, sid, "gap-copy", skip_seqs={7, 8})
    assert main(["replay", "gap-copy", "--db", uri]) == 0
    assert "seq gap: event(s) 7..8" in capsys.readouterr().out


def test_verify_passes_and_leaves_source_untouched(recorded, capsys):
    uri, store, sid = recorded
    before = store.events.count(sid), store.events.read(sid)
    assert main(["replay", sid, "--db", uri, "--verify"]) == 0
    out = capsys.readouterr().out
    assert "replay identical" in out and out.count("IDENTICAL") == 2
    assert (store.events.count(sid), store.events.read(sid)) == before
    assert store.events.exists(f"replay-{sid}-1")


def test_verify_reports_divergence_exit_1(recorded, capsys):
    uri, store, sid = recorded
    _short_manager.done = False
    copy_session(store, sid, "altered-copy", edit=_short_manager)
    before = store.events.count("altered-copy")
    assert main(["replay", "altered-copy", "--db", uri, "--verify"]) == 1
    out = capsys.readouterr().out
    assert "first divergence" in out and "DEBATE" in out and "results[0].winner" in out
    assert store.events.count("altered-copy") == before


def test_schema_version_mismatch_exits_2(recorded, capsys):
    uri, store, sid = recorded
    copy_session(store, sid, "old-schema", edit=lambda ev: {**ev, "schema_version": 0})
    assert main(["replay", "old-schema", "--db", uri, "--verify"]) == 2
    assert "schema_version" in capsys.readouterr().err


@pytest.mark.integration
def test_cli_end_to_end_on_embedded(embedded_uri, tmp_path, tradegraph):
    """`tradegraph run` twice, then `tradegraph replay --verify`, as separate processes on a real server; the HTML
    page is then written in process."""
    db = f"{embedded_uri}/cli_{uuid.uuid4().hex[:8]}"
    exe = [sys.executable, "-m", "graph.transports.cli.main"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRADEGRAPH_LLM": "offline"}
    env.pop("OPENAI_API_KEY", None)

    def tg(*args):
        return subprocess.run(
            exe + list(args) + ["--db", db], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )

    r = tg("run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--json")
    assert r.returncode == 0, r.stderr
    sid = json.loads(r.stdout)["session_id"]
    assert tg("run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-04", "--session", sid).returncode == 0
    r = tg("replay", sid, "--verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay identical" in r.stdout
    r = tradegraph("replay", sid, "--html", str(tmp_path / "p.html"), "--db", db)
    assert r.returncode == 0 and (tmp_path / "p.html").stat().st_size > 10_000
