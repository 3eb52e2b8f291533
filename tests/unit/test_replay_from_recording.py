"""Replay re-executes from the recording alone: the manifest's configuration, the recorded data and the
recorded human decision. It never reports a false divergence, and it tells where today differs."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from agent.config import RiskLimits
from agent.data.market import VENDORED_CSV, load_market_data
from graph.cli import main as cli_main
from graph.replay import load_session, verify_session
from graph.runner import approve_cycle, run_cycle
from tests.helpers import mock_store, runtime_with


def test_the_manifest_is_each_cycles_first_event_and_holds_no_secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    store = mock_store()
    out = run_cycle("AAPL", "2012-06-01", store=store, runtime=runtime_with())
    first = store.events.read(out.session_id)[0]
    assert first["kind"] == "manifest" and first["seq"] == 1
    m = first["payload"]
    assert m["config"]["risk"]["max_notional_pct"] == 25.0 and m["config"]["fees_bps"] == 1.0
    assert set(m["prompts"]) >= {"system", "trader", "manager"} and "submit_decision" in m["tools"]
    assert m["versions"]["langgraph"] and m["data"]["market"]["sha256"]
    assert "sk-secret-value" not in json.dumps(first)


def test_a_rejected_approval_replays_identical_without_executing():
    store = mock_store()
    paused = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with(), approve=True)
    rejected = approve_cycle(paused.session_id, store=store, approved=False, by="bob", runtime=runtime_with())
    assert rejected.status == "rejected" and "EXECUTING" not in rejected.contracts
    report = verify_session(store, paused.session_id)
    assert report.identical, report.first_divergence
    replayed = load_session(store, report.replay_session_id)
    assert "EXECUTING" not in replayed.cycles[0].contracts
    assert any(v.get("check") == "human_approval" and v.get("ok") is False for v in replayed.cycles[0].validations)


def test_a_session_from_a_users_price_file_verifies_after_the_file_is_gone(tmp_path):
    rows = gzip.decompress(Path(VENDORED_CSV).read_bytes()).decode().splitlines()
    header, body = rows[0], [r for r in rows[1:] if r.startswith("AAPL,")]
    mine = tmp_path / "my_prices.csv"
    mine.write_text("\n".join([header] + ["ZZZ" + r[4:] for r in body]) + "\n")
    store = mock_store()
    rt = runtime_with()
    rt.market = load_market_data(mine)
    out = run_cycle("ZZZ", "2012-06-01", store=store, runtime=rt)
    assert out.status == "completed"
    manifest = store.events.read(out.session_id)[0]["payload"]
    assert manifest["data"]["market"]["source"] == str(mine.resolve()) and manifest["data"]["market"]["sha256"]
    mine.unlink()
    report = verify_session(store, out.session_id)
    assert report.identical, report.first_divergence
    notes = report.cycles[0].notes
    assert any("data.market.source" in n and "my_prices.csv" in n for n in notes)


def test_verify_uses_the_recorded_limits_and_reports_todays(tmp_path, monkeypatch):
    store = mock_store()
    out = run_cycle("AAPL,MSFT", "2012-06-01", store=store, runtime=runtime_with())
    limits = tmp_path / "limits.toml"
    limits.write_text("[risk]\nmax_notional_pct = 10.0\n")
    monkeypatch.setenv("TRADEGRAPH_RISK_LIMITS", str(limits))
    assert RiskLimits.load().max_notional_pct == 10.0
    report = verify_session(store, out.session_id)
    # today's 10% cap would size differently: the recording's 25% is what the re-execution used
    assert report.identical, report.first_divergence
    assert any("config.risk.max_notional_pct: recorded 25.0, now 10.0" in n for n in report.cycles[0].notes)


def test_check_chain_names_the_first_tampered_event(capsys, monkeypatch):
    uri = "mongomock://chain_cli"
    monkeypatch.setenv("MONGODB_URI", uri)
    from database.connection import connect

    store = connect(uri)
    out = run_cycle("AAPL", "2012-06-01", store=store, runtime=runtime_with())
    assert cli_main(["replay", out.session_id, "--check-chain"]) == 0
    assert "hash chain intact" in capsys.readouterr().out
    store.db["state_events"].update_one({"session_id": out.session_id, "seq": 7},
                                        {"$set": {"payload.tampered": True}})
    assert cli_main(["replay", out.session_id, "--check-chain"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken at seq 7" in err[0]
