"""Replay re-executes from the recording alone: the manifest's configuration, the recorded data and the
recorded human decision. It never reports a false divergence, and it tells where today differs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from agent.config import RiskLimits
from agent.data.market import VENDORED_CSV, load_market_data
from graph.machine.runner import approve_cycle, run_state_machine
from graph.services.replay.session import load_session_log, verify_session
from graph.transports.cli.main import main as cli_main
from tests.helpers import mock_store, services_with


def test_the_manifest_is_each_cycles_first_event_and_holds_no_secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    store = mock_store()
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    first = store.events.read(out.session_id)[0]
    assert first["kind"] == "manifest" and first["seq"] == 1
    m = first["payload"]
    assert m["config"]["risk"]["max_notional_pct"] == 25.0 and m["config"]["fees_bps"] == 1.0
    assert set(m["prompts"]) >= {"system", "trader", "manager"} and "submit_decision" in m["tools"]
    assert m["versions"]["langgraph"] and m["data"]["market"]["sha256"]
    assert "sk-secret-value" not in json.dumps(first)


def test_a_rejected_approval_replays_identical_without_executing():
    store = mock_store()
    paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), approve=True)
    rejected = approve_cycle(paused.session_id, store=store, approved=False, by="bob", services=services_with())
    assert rejected.status == "rejected" and "EXECUTING" not in rejected.contracts
    report = verify_session(store, paused.session_id)
    assert report.identical, report.first_divergence
    replayed = load_session_log(store, report.replay_session_id)
    assert "EXECUTING" not in replayed.cycles[0].contracts
    assert replayed.cycles[0].approval == {"approved": False, "by": "bob"}
    from graph.services.replay.html import render_html  # the decision is shown where it was made

    page = render_html(load_session_log(store, paused.session_id))
    assert "<span class=bad>rejected</span> by bob" in page


def test_a_session_from_a_users_price_file_verifies_after_the_file_is_gone(tmp_path):
    rows = gzip.decompress(Path(VENDORED_CSV).read_bytes()).decode().splitlines()
    header, body = rows[0], [r for r in rows[1:] if r.startswith("AAPL,")]
    mine = tmp_path / "my_prices.csv"
    mine.write_text("\n".join([header] + ["ZZZ" + r[4:] for r in body]) + "\n")
    store = mock_store()
    rt = services_with()
    rt.market = load_market_data(mine)
    out = run_state_machine("ZZZ", "2012-06-01", store=store, services=rt)
    assert out.status == "completed"
    manifest = store.events.read(out.session_id)[0]["payload"]
    assert manifest["data"]["market"]["source"] == str(mine.resolve()) and manifest["data"]["market"]["sha256"]
    mine.unlink()
    report = verify_session(store, out.session_id)
    assert report.identical, report.first_divergence
    diffs = report.cycles[0].config_differences
    assert diffs == [
        f"data source market.source: recorded file {mine.resolve()} is missing (recorded sha256 "
        f"{manifest['data']['market']['sha256'][:12]}…)"
    ]


def test_verify_uses_the_recorded_limits_and_reports_todays(tmp_path, monkeypatch):
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    limits = tmp_path / "limits.toml"
    limits.write_text("[risk]\nmax_notional_pct = 10.0\n")
    monkeypatch.setenv("TRADEGRAPH_RISK_LIMITS", str(limits))
    assert RiskLimits.load().max_notional_pct == 10.0
    report = verify_session(store, out.session_id)
    # today's 10% cap would size differently: the recording's 25% is what the re-execution used
    assert report.identical, report.first_divergence
    assert report.cycles[0].config_differences == ["risk limit max_notional_pct: recorded 25.0, now 10.0"]


def test_check_chain_names_the_first_tampered_event(capsys, monkeypatch):
    uri = "mongomock://chain_cli"
    monkeypatch.setenv("MONGODB_URI", uri)
    from database.connection import connect

    store = connect(uri)
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    assert cli_main(["replay", out.session_id, "--check-chain"]) == 0
    assert "hash chain intact" in capsys.readouterr().out
    store.db["state_events"].update_one({"session_id": out.session_id, "seq": 7}, {"$set": {"payload.tampered": True}})
    assert cli_main(["replay", out.session_id, "--check-chain"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken at seq 7" in err[0]


# ---------------------------------------------------------------- recorded inputs, budget, pause, differences
def _case_with_item():
    from agent.data.market import default_market_data
    from graph.services.backtest.loop import build_case
    from schemas.portfolio import PortfolioSnapshot
    from schemas.simulation import CaseDataItem, EpisodeConfig

    cfg = EpisodeConfig(
        episode_id="rec",
        tickers=["AAPL", "MSFT"],
        initial_cash=100_000.0,
        start="2011-01-03",
        end="2011-03-31",
        every=5,
        bars_in_case=5,
    )
    case = build_case(cfg, default_market_data(), "2011-02-01", 3, PortfolioSnapshot(cash=100_000.0), "2011-01-25")
    case.case_data.items.append(CaseDataItem(kind="news", content="AAPL guides higher", timestamp="2011-01-31"))
    return case.for_agent()


def test_a_backtest_case_is_recorded_and_replayed_from_the_recording():
    store = mock_store()
    case = _case_with_item()
    out = run_state_machine(["AAPL", "MSFT"], "2011-02-01", store=store, services=services_with(), case=case)
    assert out.status in ("completed", "rejected")
    assert store.events.read(out.session_id)[0]["payload"]["inputs"]["case"] == case
    report = verify_session(store, out.session_id)
    # without the recorded Case the replay's PLANNING prompt lacks the case items: a false divergence
    assert report.identical, report.first_divergence and report.first_divergence.describe()
    assert not any("unrecorded" in n for n in report.cycles[0].notes)


def test_a_cycle_that_ran_out_of_token_budget_replays_the_same_failure():
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(token_budget=9000))
    assert out.status == "failed" and out.error["type"] == "TokenBudgetExceeded"
    report = verify_session(store, out.session_id)
    assert report.identical, report.first_divergence and report.first_divergence.describe()
    replayed = load_session_log(store, report.replay_session_id).cycles[0]
    # the refusal (agent/budget.py: which budget, its limit, what was used) then the state's failure, as recorded
    assert [e["type"] for e in replayed.errors] == ["budget_exceeded", "TokenBudgetExceeded"]


def test_a_different_failure_is_a_divergence_even_with_the_same_contracts():
    store = mock_store()
    # 6000 tokens run out in ANALYZING (pass protocol 4 spends between 6,500 and 7,000 through ANALYZING, each call
    # reserving its output cap before it is sent; 7000 run out in DEBATE)
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(token_budget=6000))
    # a bigger budget today must not matter (the recorded one is used), but an edited error must show
    store.db["state_events"].update_one(
        {"session_id": out.session_id, "kind": "error", "payload.type": "TokenBudgetExceeded"},
        {"$set": {"payload.type": "SomethingElse"}},
    )
    report = verify_session(store, out.session_id)
    assert not report.identical
    d = report.first_divergence
    assert (d.state, d.path, d.recorded, d.replayed) == (
        "ANALYZING",
        "error.type",
        "SomethingElse",
        "TokenBudgetExceeded",
    )


def test_a_cycle_still_waiting_for_approval_replays_to_the_same_pause():
    store = mock_store()
    paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), approve=True)
    assert paused.status == "pending_approval"
    recorded = load_session_log(store, paused.session_id)
    assert recorded.cycles[0].status == "pending_approval" and not recorded.warnings()
    report = verify_session(store, paused.session_id)
    assert report.identical, report.first_divergence
    replayed = load_session_log(store, report.replay_session_id).cycles[0]
    assert "EXECUTING" not in replayed.states and not replayed.errors
    assert replayed.status == "pending_approval"


def test_every_configuration_difference_is_listed_in_plain_words(tmp_path, monkeypatch):
    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    limits = tmp_path / "limits.toml"
    limits.write_text(
        "[risk]\nrisk_per_trade_pct = 0.5\ndaily_loss_cap_pct = 1.0\nmax_notional_pct = 20.0\n"
        "max_positions = 2\nexposure_cap_pct = 50.0\n"
    )
    env = {
        "TRADEGRAPH_RISK_LIMITS": str(limits),
        "TRADEGRAPH_LLM_RETRIES": "1",
        "TRADEGRAPH_LLM_BACKOFF_S": "2",
        "TRADEGRAPH_LLM_JITTER": "0.1",
        "TRADEGRAPH_LLM_MAX_WAIT_S": "5",
        "TRADEGRAPH_LLM_TIMEOUT": "9",
        "TRADEGRAPH_MAX_RETRIES": "1",
        "TRADEGRAPH_MAX_TOOL_STEPS": "2",
        "TRADEGRAPH_STARTING_CASH": "5000",
        "TRADEGRAPH_FEES_BPS": "5",
        "TRADEGRAPH_SLIPPAGE_BPS": "7",
        "TRADEGRAPH_TOKEN_BUDGET": "999999",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    report = verify_session(store, out.session_id)
    assert report.identical, report.first_divergence  # the recorded configuration is what re-executed
    diffs = report.cycles[0].config_differences
    assert len(diffs) == 16, diffs  # none hidden behind a "… more"
    assert "risk limit max_notional_pct: recorded 25.0, now 20.0" in diffs
    assert "fees_bps: recorded 1.0, now 5.0" in diffs
    assert "token_budget: recorded None, now 999999" in diffs
    assert "LLM retry retries: recorded 3, now 1" in diffs


def test_a_changed_prompt_template_is_named_and_the_divergence_still_reported(monkeypatch):
    from agent import prompts

    store = mock_store()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    monkeypatch.setitem(prompts.ROLE_INSTRUCTIONS, "planning", prompts.ROLE_INSTRUCTIONS["planning"] + " Be brief.")
    report = verify_session(store, out.session_id)
    assert report.cycles[0].config_differences == ["prompt template planning: hash differs"]
    assert not report.identical and report.first_divergence.state == "PLANNING"


def test_a_users_fundamentals_file_is_named_and_hashed(tmp_path):
    from agent.data.fundamentals import load_fundamentals

    mine = tmp_path / "fund.json"
    mine.write_text(json.dumps({"source": "my vendor", "records": []}))
    rt = services_with()
    rt.fundamentals = load_fundamentals(mine)
    out = run_state_machine("AAPL", "2012-06-01", store=(store := mock_store()), services=rt)
    data = store.events.read(out.session_id)[0]["payload"]["data"]["fundamentals"]
    assert data["source"] == str(mine.resolve()) and len(data["sha256"]) == 64


def test_a_tampered_recording_fails_verify_even_when_the_contracts_replay_identical(capsys, monkeypatch):
    uri = "mongomock://chain_verify"
    monkeypatch.setenv("MONGODB_URI", uri)
    from database.connection import connect

    store = connect(uri)
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=services_with())
    seq = store.events.read(out.session_id, kind="llm_response")[0]["seq"]
    store.db["state_events"].update_one(
        {"session_id": out.session_id, "seq": seq}, {"$set": {"payload.latency_ms": 1.0}}
    )  # changes no contract
    assert cli_main(["replay", out.session_id, "--verify"]) == 1
    text = capsys.readouterr().out
    assert f"hash chain broken at seq {seq}" in text and "IDENTICAL" in text
    assert cli_main(["replay", out.session_id]) == 0
    assert f"hash chain broken at seq {seq}" in capsys.readouterr().out
    assert cli_main(["replay", out.session_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chain"]["first_broken"]["seq"] == seq


def test_the_endpoint_is_recorded_as_its_host_only(monkeypatch):
    from graph.machine.manifest import build_manifest

    rt = services_with(provider="openai")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert build_manifest(rt)["model_endpoint_host"] == "api.openai.com"  # the SDK's default, not "unknown"
    monkeypatch.setenv("OPENAI_BASE_URL", "https://user:sk-in-url@llm.example.com:8443/v1?key=sk-query")
    m = build_manifest(rt)
    assert m["model_endpoint_host"] == "llm.example.com" and "sk-" not in json.dumps(m)
