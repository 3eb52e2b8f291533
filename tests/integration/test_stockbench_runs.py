"""StockBench's runs of a real model: with nothing but an OpenAI-compatible server configured, `benchmark stockbench`
runs it 3 times at the paper's temperature 0.7 (arXiv 2510.02209, Table 2), each run a session of its own whose
manifest records the temperature, and every request the server received says 0.7 and carries no seed (a seed would
make the 3 runs one sample). A temperature the user chooses is sent and printed as a departure."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from graph.transports.cli.main import main
from tests.fakes.fake_compat import FakeCompat

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a benchmark's runs against a server: 30-90 s each

ONE_SESSION = ["--symbols", "AAPL", "--start", "2025-03-03", "--end", "2025-03-03"]


@pytest.fixture
def server(monkeypatch, tmp_path):
    """vLLM's flavour of the compatible fake, configured the way a user points tradegraph at a local server."""
    for name in (
        "TRADEGRAPH_LLM",
        "TRADEGRAPH_QUICK_MODEL",
        "TRADEGRAPH_DEEP_MODEL",
        "TRADEGRAPH_STRUCTURED_METHOD",
        "MONGODB_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "local-model")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "local-model")
    monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
    with FakeCompat("vllm") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        yield fake


def _bench(tmp_path: Path, *extra: str) -> tuple[list[str], str]:
    db = f"mongomock://sbruns_{uuid.uuid4().hex[:8]}"
    return ["benchmark", "stockbench", *ONE_SESSION, "--json", "--db", db, "--out", str(tmp_path / "exp"), *extra], db


def test_a_real_model_is_run_3_times_at_the_protocols_temperature(server, tmp_path, capsys):
    args, db = _bench(tmp_path, "--benchmark-id", "real")
    assert main(args) == 0, capsys.readouterr().err
    card = json.loads(capsys.readouterr().out)
    runs = [r for r in card["rows"] if r["kind"] == "run"]
    (mean,) = [r for r in card["rows"] if r["kind"] == "run_mean"]
    assert len(runs) == 3 and mean["runs"] == 3, "3 runs by default for a provider's model"
    assert len({r["session_ids"][0] for r in runs}) == 3, "each run a session of its own"
    assert {r["temperature"] for r in runs} == {0.7}
    # every request the server received: the protocol's temperature, no seed, none answered from the cache
    assert server.requests and {b.get("temperature") for b in server.requests} == {0.7}
    assert not any("seed" in b for b in server.requests)
    assert len(server.requests) == sum(r["llm_calls"] for r in runs) and all(r["llm_calls"] > 0 for r in runs)
    assert not any(line.startswith("temperature") for line in card["departures"])  # the paper's: no departure
    # each run's manifest records the temperature its tiers were sent
    from database.connection import connect

    store = connect(db)
    try:
        for r in runs:
            (manifest,) = store.events.read(r["session_ids"][0], kind="manifest")[:1]
            models = manifest["payload"]["models"]
            assert models["quick"]["temperature"] == models["deep"]["temperature"] == 0.7
            assert manifest["payload"]["config"]["temperature"] == 0.7
    finally:
        store.close()
    # a sampled run replays as recorded: its decisions re-executed from the recording, no request sent
    sent = len(server.requests)
    assert main(["replay", runs[1]["session_ids"][0], "--verify", "--db", db]) == 0, capsys.readouterr().err
    assert len(server.requests) == sent
    capsys.readouterr()
    # the table: each run's row, and the mean ± standard deviation row of the three
    from rich.console import Console

    from graph.transports.cli.benchmark import render

    out = io.StringIO()
    render(Console(file=out, width=250), card, tmp_path)
    text = out.getvalue()
    assert "run 1" in text and "run 3" in text and "(mean of 3)" in text and " ± " in text
    assert "n=3, mean ± sample standard deviation" in text
    assert "temperature sent to the providers' models: 0.7" in text


def test_a_chosen_temperature_is_a_departure_and_a_late_cutoff_is_flagged(server, tmp_path, capsys, monkeypatch):
    """A compatible server (a proxy, say) serving claude-sonnet-4-0, whose training-data cut-off (2025-03) is the
    window's first month: the run is flagged "may have seen this window" in the JSON and the table."""
    server.model_id = server.model_name = "claude-sonnet-4-0"
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "claude-sonnet-4-0")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "claude-sonnet-4-0")
    args, _ = _bench(tmp_path, "--benchmark-id", "warm", "--runs", "1", "--temperature", "0.2")
    assert main(args) == 0, capsys.readouterr().err
    card = json.loads(capsys.readouterr().out)
    assert {b.get("temperature") for b in server.requests} == {0.2}
    assert [line for line in card["departures"] if line.startswith("temperature")] == [
        "temperature 0.2 for a provider's model, the paper's is 0.7 (Table 2: each model the mean of 3 runs at 0.7)"
    ]
    (run,) = [r for r in card["rows"] if r["kind"] == "run"]
    assert run["may_have_seen_window"] is True
    assert {c["cutoff"] for c in run["cutoffs"]} == {"2025-03"} and all(c["source"] for c in run["cutoffs"])
    from rich.console import Console

    from graph.transports.cli.benchmark import render

    out = io.StringIO()
    render(Console(file=out, width=250), card, tmp_path)
    text = out.getvalue()
    row = next(line for line in text.splitlines() if line.lstrip("│ ").startswith(run["name"]))
    assert "may have seen this window" in row, row
    assert f"{run['name']}: may have seen this window (cut-offs: " in text
    assert "n=1 per configuration" in text
    # the same benchmark id at another temperature is not the same benchmark
    again, _ = _bench(tmp_path, "--benchmark-id", "warm", "--runs", "1", "--temperature", "0.3")
    assert main(again) != 0
    assert "temperature" in capsys.readouterr().err


def test_a_model_that_takes_no_temperature_is_sent_none_and_the_scorecard_says_so(
    server, tmp_path, capsys, monkeypatch
):
    """GPT-5 (LangChain's profile: no temperature) served by the compatible fake: its requests carry none, its row
    says so (null) and the departures name it, rather than claiming the protocol's 0.7."""
    server.model_id = server.model_name = "gpt-5"
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "gpt-5")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "gpt-5")
    args, _ = _bench(tmp_path, "--benchmark-id", "reasoning", "--runs", "1")
    assert main(args) == 0, capsys.readouterr().err
    card = json.loads(capsys.readouterr().out)
    assert server.requests and not any("temperature" in b for b in server.requests)
    (run,) = [r for r in card["rows"] if r["kind"] == "run"]
    assert run["temperature"] is None
    assert card["departures"][0] == (
        "temperature: tradegraph (gpt-5) was sent null (a model that takes none samples "
        "at its own default), the protocol's is 0.7"
    )


def test_the_guides_offline_run_starts_as_todays_offline_model_decides(embedded_uri, tmp_path, capsys):
    """docs/stockbench/offline-scorecard.json's first 3 sessions, run again now: the same NAV, so the kept file is
    today's code's (else run scripts/docs_stockbench.py again)."""
    shipped = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "stockbench" / "offline-scorecard.json").read_text()
    )
    args = [
        "benchmark",
        "stockbench",
        "--end",
        "2025-03-05",
        "--json",
        "--db",
        f"{embedded_uri}/sbkept_{uuid.uuid4().hex[:10]}",
        "--out",
        str(tmp_path),
        "--benchmark-id",
        "again",
    ]
    assert main(args) == 0, capsys.readouterr().err
    (run,) = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["kind"] == "run"]
    (kept,) = [r for r in shipped["rows"] if r["kind"] == "run"]
    assert run["nav"] == kept["nav"][:3]
