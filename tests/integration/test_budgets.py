"""Budgets that hold, against the local OpenAI server that counts every request: the call that would cross a
budget is never sent (the server's count proves it), and the cycle fails closed, audited."""

import dataclasses

import pytest

from agent.config import AgentConfig
from graph.machine.cycle_context import default_services
from graph.machine.runner import run_state_machine
from graph.services.backtest.loop import run_backtest
from graph.transports.cli.main import main
from schemas.simulation import EpisodeConfig
from tests.helpers import events_of, mock_store

pytestmark = pytest.mark.integration


@pytest.fixture
def fake(openai_server):
    return openai_server


def _run(store=None, **limits):
    store = store or mock_store()
    return store, run_state_machine(
        "AAPL,MSFT", "2012-06-01", store=store, services=default_services(AgentConfig.from_env(memory="off", **limits))
    )


def _refusal(store, out) -> dict:
    """The first refusal (analysts run in parallel: several may be refused at once, each audited)."""
    events = [e["payload"] for e in events_of(store, out, "error") if e["payload"].get("type") == "budget_exceeded"]
    assert events and len({(e["budget"], e["limit"]) for e in events}) == 1
    return events[0]


@pytest.fixture
def unlimited(fake):
    """The same cycle with no budget: how many requests, tokens and dollars it takes."""
    _, out = _run()
    fake.requests.clear()
    return out


def test_max_llm_calls_stops_at_that_call(fake, unlimited):
    store, out = _run(max_llm_calls=5)
    assert len(fake.requests) == 5 < unlimited.llm_calls
    assert out.status == "failed" and out.error["type"] == "CallBudgetExceeded" and "EXECUTING" not in out.contracts
    refusal = _refusal(store, out)
    assert (refusal["budget"], refusal["limit"], refusal["used"], refusal["scope"]) == ("max_llm_calls", 5, 5, "cycle")
    # every request sent is on record with its answer; the refused one left no request behind
    assert len(events_of(store, out, "llm_request")) == len(events_of(store, out, "llm_response")) == 5


def test_max_tokens_refuses_the_call_that_would_cross_it(fake, unlimited):
    limit = unlimited.tokens["total_tokens"] // 2
    store, out = _run(token_budget=limit)
    sent = len(fake.requests)
    assert 0 < sent < unlimited.llm_calls and out.error["type"] == "TokenBudgetExceeded"
    responses = events_of(store, out, "llm_response")
    assert len(responses) == sent
    used = sum(e["payload"]["usage"]["total_tokens"] for e in responses)
    assert used <= limit  # the limit held
    refusal = _refusal(store, out)
    assert refusal["budget"] == "max_tokens" and refusal["limit"] == limit
    # at the refusal: spent, plus held by calls still in flight, plus this call's worst case crossed the limit
    assert refusal["used"] <= used and refusal["used"] + refusal["reserved"] + refusal["needed"] > limit


def test_max_cost_refuses_the_call_that_would_cross_it(fake, unlimited):
    limit = round(unlimited.cost["usd"] / 2, 6)
    store, out = _run(max_cost=limit)
    sent = len(fake.requests)
    assert 0 < sent < unlimited.llm_calls and out.error["type"] == "CostBudgetExceeded"
    spent = sum(e["payload"]["cost_usd"] for e in events_of(store, out, "llm_response"))
    assert spent <= limit and out.cost["usd"] == pytest.approx(spent)
    refusal = _refusal(store, out)
    assert refusal["budget"] == "max_cost" and refusal["used"] + refusal["reserved"] + refusal["needed"] > limit


def test_a_cost_budget_on_a_model_without_a_price_sends_nothing(fake, monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "openai:my-local-model")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "openai:my-local-model")
    store, out = _run(max_cost=1.0)
    assert len(fake.requests) == 0 and out.error["type"] == "CostBudgetExceeded"
    assert "has no price" in out.error["message"]


def test_a_budget_that_runs_out_after_executing_never_hides_the_fill(fake, unlimited):
    # every call but MEMORIZING's, the last state's
    store, out = _run(max_llm_calls=unlimited.llm_calls - 1)
    assert len(fake.requests) == unlimited.llm_calls - 1
    assert out.status == "executed_with_errors" and out.error["state"] == "MEMORIZING"
    assert out.contracts["EXECUTING"]["status"] == unlimited.contracts["EXECUTING"]["status"]
    assert store.executions.get(out.cycle_id) is not None


def test_a_backtest_budget_holds_for_the_whole_run(fake, tmp_path):
    cfg = EpisodeConfig(
        episode_id="bt-budget",
        tickers=["AAPL", "MSFT"],
        initial_cash=100_000.0,
        start="2011-01-03",
        end="2011-01-31",
        every=5,
        bars_in_case=5,
    )
    rt = default_services(AgentConfig.from_env(memory="off"))
    per_point = None
    first = run_backtest(cfg, mock_store(), progress=False, services=rt, out_dir=tmp_path / "a")
    per_point = first.llm_cost["calls"] / first.decision_points
    assert first.decision_points >= 3 and first.llm_cost["usd"] > 0
    fake.requests.clear()
    limit = int(per_point * 1.5)  # the second point runs out half way; no later point sends anything
    rt = default_services(dataclasses.replace(AgentConfig.from_env(memory="off"), max_llm_calls=limit))
    result = run_backtest(
        cfg.model_copy(update={"episode_id": "bt-budget-2"}),
        mock_store(),
        progress=False,
        services=rt,
        out_dir=tmp_path / "b",
    )
    assert len(fake.requests) == limit == result.llm_cost["calls"]
    assert result.actions.get("failed", 0) == result.decision_points - 1


def test_the_cli_flags_stop_the_cycle_and_a_bad_one_is_exit_2(fake, capsys):
    store = mock_store()
    code = main(
        [
            "run",
            "--symbols",
            "AAPL",
            "--as-of",
            "2012-06-01",
            "--memory",
            "off",
            "--max-llm-calls",
            "3",
            "--json",
            "--db",
            store.uri,
        ]
    )
    assert code == 1 and len(fake.requests) == 3
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--max-cost", "-1", "--db", store.uri]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "tradegraph: error: --max-cost -1 must be positive"
    assert len(fake.requests) == 3


def test_a_studio_run_takes_its_budgets_and_cache_from_the_process(monkeypatch):
    """A LangGraph Studio server's runs carry only strings in their config (graph/transports/studio.py): set_default_services
    installs the process's budgets ($TRADEGRAPH_MAX_*) and cache; a run tradegraph started never uses them."""
    from langgraph.runtime import Runtime

    from graph.machine.cycle_context import CycleContext, context_of, set_default_services
    from graph.machine.execution import PaperExecution

    monkeypatch.setenv("TRADEGRAPH_MAX_LLM_CALLS", "7")
    store = mock_store()
    rt = default_services(AgentConfig.from_env())
    rt.execution = PaperExecution(store, rt.config)
    import graph.machine.cycle_context as cycle_context

    before = cycle_context._default
    set_default_services(rt)
    try:
        studio = {"configurable": {"session_id": "s", "cycle_id": "s:c1"}}
        budget = context_of(None, studio).call().budget
        assert budget is not None and budget.max_llm_calls == 7 and context_of(None, studio).budget is budget
        assert context_of(None, {"configurable": {"cycle_id": "s:c2"}}).budget is not budget
        cache = context_of(None, studio).call().cache
        assert cache is not None and cache.col.name == "llm_cache"
        # a run tradegraph started hands its own context: None means none, never the process's
        ours = context_of(Runtime(context=CycleContext(rt)), studio)
        assert ours.call().budget is None and ours.call().cache is None
    finally:
        from agent.budget import install_process_budgets
        from agent.cache import install_process_cache

        install_process_budgets(None)
        install_process_cache(None)
        cycle_context._default = before


def test_start_backtest_takes_the_budget_and_the_cache_switch(fake, tmp_path):
    """The kernel path every transport shares (CLI backtest, HTTP, MCP): the task's services get the input's limits."""
    from graph.kernel.core import Kernel

    k = Kernel(mock_store(), experiments_dir=tmp_path)
    args = {
        "symbols": ["AAPL", "MSFT"],
        "start": "2011-01-03",
        "end": "2011-01-31",
        "every": 5,
        "memory": "off",
        "max_llm_calls": 20,
        "no_cache": True,
    }
    task = k.call("start_backtest", args)
    k.tasks.join(task.task_id)
    assert k.call("task_status", {"task_id": task.task_id}).status == "succeeded"
    assert len(fake.requests) == 20
    files = {a.name: a.path for a in k.call("task_artifacts", {"task_id": task.task_id}).artifacts}
    from pathlib import Path

    from schemas.simulation import EpisodeResult

    result = EpisodeResult.model_validate_json(Path(files["result.json"]).read_text())
    assert result.llm_cost["calls"] == 20 and result.actions.get("failed", 0) >= 1
    assert result.llm_cost["cached_calls"] == 0


def test_a_nonsense_usage_report_counts_as_the_call_s_cap_and_is_audited(fake, unlimited):
    """Issue 28: a provider answering `total_tokens: -1000000000` gave the budget back a billion tokens per answer
    (13 requests ran against 3). Now each such report is not believed: the call counts as its reservation (input
    estimate + output cap), audited as a failed `usage` validation, so no more requests run than honest usage
    allows."""
    limit = unlimited.tokens["total_tokens"] // 4
    _, honest = _run(token_budget=limit)
    honest_sent = len(fake.requests)
    assert 0 < honest_sent < unlimited.llm_calls and honest.error["type"] == "TokenBudgetExceeded"
    fake.requests.clear()
    fake.usage_override = {"total_tokens": -1_000_000_000}
    store, out = _run(token_budget=limit)
    lied = len(fake.requests)
    assert 0 < lied <= honest_sent and out.error["type"] == "TokenBudgetExceeded"
    print(f"\nmax_tokens {limit}: {honest_sent} request(s) with honest usage, {lied} with total_tokens -1e9 reported")
    checks = [e["payload"] for e in events_of(store, out, "validation") if e["payload"].get("check") == "usage"]
    assert len(checks) == lied and all(c["ok"] is False for c in checks)
    assert checks[0]["error"] == "reported total_tokens -1000000000 is not a whole number from 0 to 10,000,000"
    assert checks[0]["reported"]["total_tokens"] == -1_000_000_000 and checks[0]["counted_tokens"] > 0
    # the refusal counts what was settled: never less than nothing
    refusal = _refusal(store, out)
    assert refusal["used"] == sum(c["counted_tokens"] for c in checks) > 0
    # an absurd report (more than any request can use) is not believed either
    fake.requests.clear()
    fake.usage_override = {"prompt_tokens": 10**12, "total_tokens": 10**12 + 5}
    store, out = _run(token_budget=limit)
    assert 0 < len(fake.requests) <= honest_sent
    assert [e["payload"]["error"] for e in events_of(store, out, "validation") if e["payload"].get("check") == "usage"][
        0
    ].startswith("reported input_tokens 1000000000000 is not")
