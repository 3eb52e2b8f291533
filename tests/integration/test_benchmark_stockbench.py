"""`tradegraph benchmark stockbench` end to end on a short window of the shipped StockBench data: through the CLI as
a process (files, JSON shape, the baseline equal to equal_weight_buy_and_hold on those opens; then, in process, the
run's session verifying with `replay --verify`, the look-ahead audit clean, the same id resuming), over HTTP as a task (keyed,
watched over SSE, artifacts served, the audit), `--estimate` sending no request to a counting provider, a failed
decision point making the exit 1, and a cancelled benchmark resuming to every point logged once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from agent.data.sources import load_file, stockbench_files
from agent.metrics import equal_weight_buy_and_hold, stockbench_metrics
from graph.transports.cli.main import main as cli_main
from graph.transports.client import Client
from tests.fakes.fake_openai import Fault
from tests.kernel.servers import REPO, McpToolError, free_port, mcp_stdio, serve, server_env

pytestmark = pytest.mark.integration

SYMBOLS = ["AAPL", "MSFT", "JPM", "MCD"]
WINDOW = ["--start", "2025-03-03", "--end", "2025-03-07"]  # 5 sessions


def process(*args: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`tradegraph` as a process of its own (the run under test); read-backs and resumes run in process through
    the `tradegraph` fixture (tests/conftest.py)."""
    return subprocess.run(
        [sys.executable, "-m", "graph.transports.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def every_event_parses(db: str, *sessions: str) -> int:
    """parse_event (schemas/events.py) reads every event these sessions stored; how many there were."""
    from database.connection import connect
    from schemas.events import parse_event

    store = connect(db)
    try:
        events = [e for s in sessions for e in store.events.read(s)]
    finally:
        store.close()
    assert {e["session_id"] for e in events} == set(sessions)
    for event in events:
        parse_event(event)  # raises, naming the event, on one this code cannot read
    return len(events)


def opens(symbols: list[str], dates: list[str]) -> dict[str, list[float]]:
    market = load_file("prices", stockbench_files().prices)
    return {s: [float(market.bars(s, d, d)["open"].iloc[0]) for d in dates] for s in symbols}


def test_an_offline_benchmark_end_to_end_through_the_cli(
    embedded_uri, tmp_path, stockbench_home, tradegraph, monkeypatch
):
    db = f"{embedded_uri}/sb_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRADEGRAPH_HOME": str(stockbench_home)}
    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        ",".join(SYMBOLS),
        *WINDOW,
        "--benchmark-id",
        "e2e",
        "--json",
        "--db",
        db,
        "--out",
        str(tmp_path / "exp"),
    ]
    done = process(*args, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    card = json.loads(done.stdout)

    assert card["benchmark"] == "stockbench" and card["symbols"] == SYMBOLS
    dates = ["2025-03-03", "2025-03-04", "2025-03-05", "2025-03-06", "2025-03-07"]
    assert card["window"] == {"start": dates[0], "end": dates[-1], "sessions": 5}
    run, base = card["rows"][0], card["rows"][1]
    assert [r["kind"] for r in card["rows"][:2]] == ["run", "baseline"]
    assert {r["kind"] for r in card["rows"][2:]} == {"published"}
    for row in (run, base):
        assert [p["date"] for p in row["nav"]] == dates
        assert row["max_drawdown"] <= 0
    # the run row is its NAV scored by StockBench's definitions, against the starting cash
    equity = [p["equity"] for p in run["nav"]]
    assert run["cumulative_return"] == pytest.approx(equity[-1] / 100_000 - 1, abs=1e-7)
    assert run["sortino"] == pytest.approx(stockbench_metrics(equity, 100_000)["sortino"], rel=1e-4)
    assert run["session_ids"] == ["bt-e2e-e000"] and run["failed_points"] == 0
    # the baseline is equal_weight_buy_and_hold on those opens, read here from the data itself
    expected = equal_weight_buy_and_hold(opens(SYMBOLS, dates), 100_000.0, entry_cost_bps=3.0)
    assert [p["equity"] for p in base["nav"]] == pytest.approx([round(v, 2) for v in expected])
    # its figures are its NAV's from the starting cash, entry cost included; StockBench's own (from the first point)
    # in the gross column
    assert base["cumulative_return"] == pytest.approx(expected[-1] / 100_000 - 1)
    assert base["gross_cumulative_return"] == pytest.approx(expected[-1] / expected[0] - 1)
    folder = tmp_path / "exp" / "e2e"
    for name in ("benchmark.json", "scorecard.json", "scorecard.csv", "scorecard.png"):
        assert (folder / name).stat().st_size > 0, name
    assert json.loads((folder / "scorecard.json").read_text())["rows"][0]["nav"] == run["nav"]
    head = run["chain_heads"][0]
    assert head["session_id"] == "bt-e2e-e000" and head["seq"] > 0

    # anyone can check the run's decisions: replayed from the recording, identical
    monkeypatch.chdir(tmp_path)
    home = {"TRADEGRAPH_HOME": str(stockbench_home)}
    verify = tradegraph("replay", "bt-e2e-e000", "--verify", "--db", db, **home)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "replay identical to the recording" in verify.stdout
    # every event the benchmark run and its replay stored is one of the audit log's typed events
    assert every_event_parses(db, "bt-e2e-e000", "replay-bt-e2e-e000-1") > 0
    # the look-ahead audit of the benchmark id finds its run's session and nothing dated after a decision
    audit = tradegraph("audit", "lookahead", "e2e", "--json", "--db", db, "--out", str(tmp_path / "exp"), **home)
    assert audit.returncode == 0, audit.stderr
    report = json.loads(audit.stdout)
    assert report["resolved"] == "benchmark" and report["sessions"] == ["bt-e2e-e000"]
    assert report["cycles"] == 5 and report["leaks"] == [] and report["checked"]["bar"] > 0
    assert report["checked"]["news"] > 0 and card["lookahead"]["leaks"] == 0

    # the same id again resumes: nothing left to decide, the same figures
    again = tradegraph(*args, **home)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rows"][0]["nav"] == run["nav"]
    log = (folder / "episodes" / "e2e-e000" / "episode_log.jsonl").read_text().splitlines()
    assert [json.loads(line)["decision_point_idx"] for line in log] == list(range(5))


def test_a_benchmark_over_http_is_a_keyed_task_with_its_scorecard_served(embedded_uri, tmp_path, stockbench_home):
    db = f"{embedded_uri}/sbh_{uuid.uuid4().hex[:10]}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    body = {"symbols": ["AAPL", "MSFT"], "start": "2025-03-03", "end": "2025-03-05", "benchmark_id": "http-sb"}
    env = server_env(db, stockbench_home, TRADEGRAPH_RUNS_DIR=str(tmp_path / "experiments"))
    with serve(["serve", "--port", str(port)], env, tmp_path, f"{base}/store"):
        with httpx.Client(base_url=base, timeout=120) as h:
            key = {"Idempotency-Key": uuid.uuid4().hex}
            first = h.post("/benchmarks/stockbench", json=body, headers=key)
            retry = h.post("/benchmarks/stockbench", json=body, headers=key)
            assert first.status_code == retry.status_code == 202, first.text
            assert first.json() == retry.json()  # the retry got the first answer: one task
            task = first.json()
            assert task["kind"] == "benchmark" and task["run_id"] == "http-sb"
            assert task["progress"] == {**task["progress"], "done": 0, "total": 3, "unit": "points"}
            events = []
            with h.stream("GET", f"/tasks/{task['task_id']}/events", timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
            assert events[-1]["status"] == "succeeded", events[-1]
            done = [e["progress"]["done"] for e in events]
            assert done == sorted(done) and done[-1] == 3 and events[-1]["progress"]["date"] == "2025-03-05"
            assert {t["task_id"] for t in h.get("/tasks").json()["tasks"]} >= {task["task_id"]}
            arts = h.get(f"/tasks/{task['task_id']}/artifacts").json()
            assert {a["name"] for a in arts["artifacts"]} == {
                "benchmark.json",
                "scorecard.json",
                "scorecard.csv",
                "scorecard.png",
            }
            card = h.get(f"/tasks/{task['task_id']}/artifacts/scorecard.json").json()
            assert card == arts["metrics"]["scorecard"] and card["rows"][0]["session_ids"] == ["bt-http-sb-e000"]
            assert arts["metrics"]["summary"]["clean"] is True
            audit = h.get("/audit/lookahead/http-sb").json()
            assert audit["clean"] and audit["cycles"] == 3 and audit["sessions"] == ["bt-http-sb-e000"]
            # a folder name that is no name: refused before anything is written
            bad = h.post("/benchmarks/stockbench", json={**body, "benchmark_id": ".."})
            assert bad.status_code == 422 and bad.json()["field"] == "benchmark_id"
            outside = h.post("/benchmarks/stockbench", json={**body, "benchmark_id": "d", "data": "/etc"})
            assert outside.status_code == 403 and "TRADEGRAPH_DATA_DIRS" in outside.json()["message"]
        # the same capabilities over MCP (another process on the same store) and the Python client over HTTP
        with mcp_stdio(env, tmp_path) as mcp, Client.http(base) as client:
            args = {**body, "benchmark_id": "mcp-sb", "end": "2025-03-04", "idempotency_key": "k-mcp-1"}
            started = mcp("start_benchmark", args)
            assert mcp("start_benchmark", args).task_id == started.task_id  # keyed: one task
            seen = list(client.watch_task(started.task_id))  # run by the MCP server, watched over HTTP
            assert seen[-1].status == "succeeded" and seen[-1].progress.done == 2, seen[-1].error
            assert mcp("audit_lookahead", {"target": "mcp-sb"}).clean
            assert client.audit_lookahead("bt-mcp-sb-e000").resolved == "session"
            with pytest.raises(McpToolError, match="^not_found: 'nope' is no session"):
                mcp("audit_lookahead", {"target": "nope"})
            est = client.estimate_benchmark(symbols=["AAPL"], start="2025-03-03", end="2025-03-04")
            assert est.window["sessions"] == 2 and est.configurations[0].usd == 0.0  # offline: priced at $0
    # nothing of the refused requests was written
    assert sorted(os.listdir(tmp_path / "experiments")) == ["http-sb", "mcp-sb"]


@pytest.fixture
def provider(openai_server, monkeypatch):
    """The counting OpenAI-compatible fake (tests/conftest.py) as the configured provider."""
    monkeypatch.setenv("TRADEGRAPH_LLM", "openai")
    monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
    return openai_server


def test_estimate_sends_no_request_and_the_run_it_prices_does(provider, tmp_path, capsys):
    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-03",
        "--model",
        "openai:gpt-4o-mini",
        "--json",
        "--db",
        f"mongomock://est_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path / "exp"),
    ]
    assert cli_main(args + ["--estimate", "--runs", "1"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert provider.requests == []  # the counting provider was sent nothing
    (row,) = est["configurations"]
    assert row["quick_model"] == "openai:gpt-4o-mini" and row["priced_as"]["quick"] == "gpt-4o-mini"
    assert row["runs"] == 1
    # by default a provider's model is run 3 times (the paper's protocol): the estimate prices all 3
    assert cli_main(args + ["--estimate"]) == 0
    (three,) = json.loads(capsys.readouterr().out)["configurations"]
    assert (
        three["runs"] == 3
        and three["calls"] == 3 * row["calls"]
        and three["usd"] == pytest.approx(3 * row["usd"], abs=1e-4)
    )
    assert row["calls"] > 0 and row["input_tokens"] > 0 and 0 < row["usd"] < row["usd_worst"]
    assert est["window"]["sessions"] == 1 and "4 characters per token" in est["tokenizer"]
    # the same benchmark run for real goes to the provider, about as often as estimated (same graph, the fake
    # answers by the offline model's rules)
    assert cli_main(args + ["--benchmark-id", "priced", "--runs", "1"]) == 0  # one run, as the estimate prices
    card = json.loads(capsys.readouterr().out)
    sent = len(provider.requests)
    assert sent == card["rows"][0]["llm_calls"] > 0
    assert abs(sent - row["calls"]) <= 0.2 * row["calls"], (sent, row["calls"])


def test_a_failed_decision_point_makes_the_exit_1_and_says_so(provider, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_MAX_RETRIES", "0")
    provider.faults = [Fault(when="Plan", status=401)]  # the first point's plan is refused: that cycle fails
    db = f"mongomock://fail_{uuid.uuid4().hex[:8]}"
    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-04",
        "--json",
        "--db",
        db,
        "--out",
        str(tmp_path / "exp"),
        "--benchmark-id",
        "fails",
        "--runs",
        "1",
    ]
    code = cli_main(args)
    captured = capsys.readouterr()
    assert not provider.faults, "the scripted refusal was used"
    run = json.loads(captured.out)["rows"][0]
    assert run["failed_points"] == 1 and len(run["nav"]) == 2
    assert code == 1 and "1 decision point(s) failed (allowed: 0)" in captured.err
    # the task every transport sees says so too: its progress and its summary
    from database import connect

    task = connect(db).db["tasks"].find_one({"run_id": "fails"})
    assert task["progress"]["failed"] == 1 and task["summary"]["failed_points"] == 1
    assert task["summary"]["clean"] is False and "1 decision point(s) failed" in task["summary"]["warnings"][0]
    # accepted when allowed, and still reported
    assert cli_main(args + ["--allow-failures", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["failed_points"] == 1


def test_a_cancelled_benchmark_resumes_with_every_point_logged_once(tmp_path):
    from graph.kernel import Kernel

    k = Kernel.open(f"mongomock://cancel_{uuid.uuid4().hex[:8]}", experiments_dir=tmp_path / "exp", env={})
    try:
        body = {"symbols": ["AAPL", "MSFT"], "start": "2025-03-03", "end": "2025-03-07", "benchmark_id": "stop"}
        t = k.call("start_benchmark", body)
        for view in k.watch(t.task_id, poll_s=0.05):
            if view.progress.done >= 1 and not view.cancel_requested:
                k.call("cancel_task", {"task_id": t.task_id})
        assert view.status == "cancelled" and view.resumable and view.progress.done < 5
        assert not (tmp_path / "exp" / "stop" / "scorecard.json").exists()
        resumed = k.call("resume_task", {"task_id": t.task_id})
        final = list(k.watch(resumed.task_id, poll_s=0.1))[-1]
        assert final.status == "succeeded" and final.progress.done == 5
        log = (tmp_path / "exp" / "stop" / "episodes" / "stop-e000" / "episode_log.jsonl").read_text().splitlines()
        assert [json.loads(line)["decision_point_idx"] for line in log] == list(range(5))
        assert (tmp_path / "exp" / "stop" / "scorecard.json").is_file()
    finally:
        k.close()


TWO_CONFIGS = ["--model", "offline:offline-quick/offline:offline-deep", "--model", "offline:offline-deep"]


@pytest.mark.requires("ray")
def test_several_configurations_on_ray_are_the_runs_one_worker_gives(
    embedded_uri, tmp_path, stockbench_home, tradegraph
):
    """--workers 2 hands the same episodes to the sweep's Ray driver (in process: it starts and stops a local
    instance of its own); one worker, in a process that never imports Ray, runs the same configurations to the same
    figures."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRADEGRAPH_HOME": str(stockbench_home)}
    common = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-05",
        *TWO_CONFIGS,
        "--json",
        "--out",
        str(tmp_path / "exp"),
    ]
    ray_db = f"{embedded_uri}/sbr_{uuid.uuid4().hex[:8]}"
    on_ray = tradegraph(
        *common, "--workers", "2", "--benchmark-id", "ray", "--db", ray_db, TRADEGRAPH_HOME=str(stockbench_home)
    )
    assert on_ray.returncode == 0, on_ray.stderr
    ray_rows = [r for r in json.loads(on_ray.stdout)["rows"] if r["kind"] == "run"]
    assert [r["session_ids"] for r in ray_rows] == [["bt-ray-e000"], ["bt-ray-e001"]]
    assert every_event_parses(ray_db, "bt-ray-e000", "bt-ray-e001") > 0  # written by the sweep's Ray workers

    # one worker: the same command in a process that reports whether Ray was ever imported
    probe = (
        "import sys, runpy; sys.argv = ['tradegraph'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('graph.transports.cli', run_name='__main__')\n"
        "finally:\n    print('RAY_IMPORTED' if 'ray' in sys.modules else 'RAY_NOT_IMPORTED', file=sys.stderr)\n"
    )
    here = subprocess.run(
        [
            sys.executable,
            "-c",
            probe,
            *common,
            "--workers",
            "1",
            "--benchmark-id",
            "here",
            "--db",
            f"{embedded_uri}/sbh_{uuid.uuid4().hex[:8]}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert here.returncode == 0, here.stderr
    assert "RAY_NOT_IMPORTED" in here.stderr
    here_rows = [r for r in json.loads(here.stdout)["rows"] if r["kind"] == "run"]
    assert [r["name"] for r in here_rows] == [r["name"] for r in ray_rows]
    assert [[p["equity"] for p in r["nav"]] for r in here_rows] == [[p["equity"] for p in r["nav"]] for r in ray_rows]


def test_one_budget_holds_across_every_run_of_the_benchmark(provider, tmp_path, capsys):
    """--max-llm-calls is the whole benchmark's: two configurations on the counting provider send exactly the
    allowed requests between them (one run alone would send more), then every later call is refused unsent."""
    args = [
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-04",
        "--model",
        "openai:gpt-4o-mini",
        "--model",
        "openai:gpt-4o",
        "--max-llm-calls",
        "40",
        "--json",
        "--db",
        f"mongomock://budget_{uuid.uuid4().hex[:8]}",
        "--out",
        str(tmp_path / "exp"),
        "--benchmark-id",
        "budget",
        "--runs",
        "1",
    ]
    code = cli_main(args)
    captured = capsys.readouterr()
    runs = [r for r in json.loads(captured.out)["rows"] if r["kind"] == "run"]
    assert len(provider.requests) == 40 == sum(r["llm_calls"] for r in runs)
    assert runs[0]["llm_calls"] > 27 > runs[1]["llm_calls"]  # the first run alone took most of it
    assert runs[1]["failed_points"] == 2 and code == 1 and "failed" in captured.err


def test_ctrl_c_stops_after_the_current_point_and_the_same_id_resumes(
    embedded_uri, tmp_path, stockbench_home, tradegraph, monkeypatch
):
    import signal
    import time

    db = f"{embedded_uri}/sbc_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRADEGRAPH_HOME": str(stockbench_home)}
    args = [
        sys.executable,
        "-m",
        "graph.transports.cli",
        "benchmark",
        "stockbench",
        "--symbols",
        "AAPL,MSFT",
        "--start",
        "2025-03-03",
        "--end",
        "2025-03-12",
        "--benchmark-id",
        "sigint",
        "--json",
        "--db",
        db,
        "--out",
        str(tmp_path / "exp"),
    ]
    log = tmp_path / "exp" / "sigint" / "episodes" / "sigint-e000" / "episode_log.jsonl"
    # SIGINT restored for the child: a shell's background job (`make test &`) starts its children with it
    # ignored, and the benchmark then runs to its end (exit 0)
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "resumes with --benchmark-id sigint" in err and out == ""
    stopped = [json.loads(line)["decision_point_idx"] for line in log.read_text().splitlines()]
    assert stopped == list(range(len(stopped))) and 1 <= len(stopped) < 8
    assert not (tmp_path / "exp" / "sigint" / "scorecard.json").exists()
    monkeypatch.chdir(tmp_path)
    again = tradegraph(*args[3:], TRADEGRAPH_HOME=str(stockbench_home))
    assert again.returncode == 0, again.stderr
    assert [json.loads(line)["decision_point_idx"] for line in log.read_text().splitlines()] == list(range(8))
    assert len(json.loads(again.stdout)["rows"][0]["nav"]) == 8


@pytest.mark.parametrize("value", ["..", ".", "", "a/../..", "/abs"])
def test_ids_that_would_leave_their_folder_are_refused_on_the_cli(value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = ["--db", f"mongomock://ids_{uuid.uuid4().hex[:8]}", "--out", str(tmp_path / "exp")]
    assert cli_main(["benchmark", "stockbench", "--benchmark-id", value, "--symbols", "AAPL", *db]) == 2
    assert "--benchmark-id" in capsys.readouterr().err
    assert cli_main(["audit", "lookahead", value, *db]) == 2
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere
