"""Every request a provider model is sent carries its state's output cap (issue 31): a local server without one
generates until its context is full. The caps come from the contracts, TRADEGRAPH_MAX_OUTPUT_TOKENS and
TRADEGRAPH_MAX_OUTPUT_TOKENS_<STATE>; the manifest records them and the budgets reserve them."""

import pytest

from agent.config import AgentConfig, ConfigError
from agent.output_caps import MAX_DEFAULT, contract_tokens, default_caps
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from schemas.plan import Plan
from tests.helpers import events_of, mock_store

pytestmark = pytest.mark.integration


def _run(store):
    return run_state_machine("AAPL", "2012-06-01", store=store, services=default_services(AgentConfig.from_env()))


def _schema(body) -> str:
    rf = body.get("response_format") or {}
    return (rf.get("json_schema") or {}).get("name") or ("tools" if body.get("tools") else "")


def test_every_request_carries_its_states_cap(openai_server, monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_MAX_OUTPUT_TOKENS", "700")
    monkeypatch.setenv("TRADEGRAPH_MAX_OUTPUT_TOKENS_PLANNING", "300")
    store = mock_store()
    out = _run(store)
    bodies = openai_server.requests
    assert bodies and all("max_tokens" in b for b in bodies), "a request without an output cap"
    plans = [b for b in bodies if _schema(b) == "Plan"]
    assert plans and {b["max_tokens"] for b in plans} == {300}
    assert {b["max_tokens"] for b in bodies if _schema(b) != "Plan"} == {700}
    manifest = events_of(store, out, "manifest")[0]["payload"]
    caps = dict(p.split("=") for p in manifest["config"]["output_caps"].split(","))
    caps = {k: int(v) for k, v in caps.items()}
    assert caps["PLANNING"] == 300 and caps["DEBATE"] == 700


def test_the_defaults_come_from_the_contracts(openai_server):
    _run(mock_store())
    plans = [b for b in openai_server.requests if _schema(b) == "Plan"]
    assert plans and plans[0]["max_tokens"] == default_caps()["PLANNING"] == min(MAX_DEFAULT, contract_tokens(Plan))


@pytest.mark.parametrize(
    "var,value,message",
    [
        ("TRADEGRAPH_MAX_OUTPUT_TOKENS", "0", "TRADEGRAPH_MAX_OUTPUT_TOKENS='0' is outside 16..200000"),
        ("TRADEGRAPH_MAX_OUTPUT_TOKENS_PLANING", "100", "'PLANING' is not a state"),
        ("TRADEGRAPH_MAX_OUTPUT_TOKENS_DEBATE", "lots", "TRADEGRAPH_MAX_OUTPUT_TOKENS_DEBATE='lots' is not an integer"),
    ],
)
def test_a_bad_cap_is_refused_naming_it(var, value, message, monkeypatch):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=message):
        AgentConfig.from_env()


def test_the_estimate_prices_the_worst_case_at_each_states_cap(monkeypatch, tmp_path, capsys):
    import json
    import uuid

    from graph.transports.cli.main import main

    monkeypatch.setenv("TRADEGRAPH_MAX_OUTPUT_TOKENS", "100")
    monkeypatch.setenv("TRADEGRAPH_MAX_OUTPUT_TOKENS_DEBATE", "40")
    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-03",
        "--json",
        "--db",
        f"mongomock://cap_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path / "exp"),
        "--estimate",
    ]
    assert main(args) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["output_caps"]["DEBATE"] == 40 and est["output_caps"]["PLANNING"] == 100
    by_state = est["per_point"]["by_state"]
    (row,) = est["configurations"]
    expected = sum(round(b["calls"]) * (40 if s == "DEBATE" else 100) for s, b in by_state.items())
    assert row["output_tokens_worst"] == expected and by_state["DEBATE"]["calls"] > 0
