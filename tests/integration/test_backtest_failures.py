"""A backtest where only some cycles fail, against the real ChatOpenAI path and a provider that refuses some
requests: failed and degraded cycles are counted and listed, never held, and they decide the exit code."""

import json
import uuid

import pytest

from graph.transports.cli.main import main as cli_main
from tests.fakes.fake_openai import FakeOpenAI, Fault

pytestmark = pytest.mark.integration


@pytest.fixture
def fake(monkeypatch):
    with FakeOpenAI() as server:
        monkeypatch.setenv("TRADEGRAPH_LLM", "openai")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
        for name in (
            "TRADEGRAPH_QUICK_MODEL",
            "TRADEGRAPH_LLM_TIMEOUT",
            "TRADEGRAPH_LLM_RETRIES",
            "TRADEGRAPH_LLM_MAX_WAIT_S",
            "TRADEGRAPH_TOKEN_BUDGET",
        ):
            monkeypatch.delenv(name, raising=False)
        yield server


def test_some_cycles_fail_or_degrade_and_allow_failures_sets_the_bar(fake, tmp_path, capsys, monkeypatch):
    # a 401 fails its state at once: the first two cycles lose their plan (failed); with no repair retries an
    # answer that is not JSON costs one analyst, so the third cycle loses two of four (quorum 3/4: degraded);
    # the other three complete
    monkeypatch.setenv("TRADEGRAPH_MAX_RETRIES", "0")
    fake.faults = [
        Fault(when="Plan", status=401),
        Fault(when="Plan", status=401),
        Fault(when="AnalystNote", content="not json"),
        Fault(when="AnalystNote", content="not json"),
    ]
    argv = [
        "backtest",
        "--symbols",
        "AAPL",
        "--start",
        "2012-06-04",
        "--end",
        "2012-06-11",
        "--json",
        "--db",
        f"mongomock://bt_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path / "exp"),
        "--run-id",
        "some",
    ]
    code = cli_main(argv + ["--allow-failures", "2"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert not fake.faults, "every scripted refusal was used"
    assert out["decision_points"] == 6
    assert out["cycle_statuses"].get("failed") == 2 and out["cycle_statuses"].get("degraded") == 1
    assert out["actions"]["failed"] == 3 and sum(out["actions"].values()) == 6
    assert [(p["date"], p["status"]) for p in out["failed_points"]] == [
        ("2012-06-04", "failed"),
        ("2012-06-05", "failed"),
        ("2012-06-06", "degraded"),
    ]
    assert "401" in out["failed_points"][0]["error"] and "quorum" in out["failed_points"][2]["error"]
    # three failed points are more than the two allowed
    assert code == 1 and "3 of 6 cycle(s) failed (allowed: 2)" in captured.err
    logs = [json.loads(line) for line in (tmp_path / "exp" / "some" / "episode_log.jsonl").read_text().splitlines()]
    assert [lg["action"] for lg in logs[:3]] == ["failed"] * 3, "a failed cycle is never logged as a hold"
    # the same run resumed (nothing left to run) with three allowed: exit 0, the failures still reported
    assert cli_main(argv + ["--allow-failures", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["actions"]["failed"] == 3
