"""`tradegraph sweep` on a local Ray instance: a grid from TOML runs as Ray tasks and writes its results,
aggregate and plot; an episode inside the sweep trades exactly as the same backtest run alone; one budget
holds across all the sweep's workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from pymongo import MongoClient

from graph.services.backtest.loop import SHORT_WINDOW_POINTS
from tests.helpers import cli_here, local_ray

pytestmark = [pytest.mark.integration, pytest.mark.requires("ray")]

CLI = [sys.executable, "-m", "graph.transports.cli"]
# loose enough for the offline agent's sizing to pass VALIDATING, so the episodes trade (an equality of two
# empty trade histories would prove nothing)
LOOSE = {"max_notional_pct": 60.0, "exposure_cap_pct": 100.0}

GRID = """
universes = [["AAPL", "MSFT"]]
memory = ["session"]
every = 5
workers = 2

[windows]
kind = "rolling"
start = "2011-01-03"
end = "2011-03-01"
length = 20
step = 20

[[overrides]]
label = "base"

[[overrides]]
label = "loose"
fees_bps = 5
max_notional_pct = 60
exposure_cap_pct = 100
"""


def _env(**extra) -> dict[str, str]:
    return {**os.environ, "TRADEGRAPH_LLM": "offline", **extra}


def _run(argv, **env) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + argv, env=_env(**env), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def ray_here() -> Iterator[None]:
    """One local Ray instance in this process, which the module's sweeps join: they run in process (cli_here), and a
    sweep joins a Ray its caller already initialized instead of starting one. One instance and one set of workers
    (tradegraph imported once) serve both sweeps, where each started a process, an instance and two workers of its
    own (~15 s of CPU). A sweep starting and stopping an instance of its own is tested where the sweep is a process:
    tests/faults/test_sweep_faults.py, the StockBench benchmark on Ray and the server's sweep in test_parity.py."""
    with local_ray(2):
        yield


@pytest.fixture(scope="module")
def swept(embedded_uri, tmp_path_factory, ray_here):
    tmp = tmp_path_factory.mktemp("sweep")
    db = f"{embedded_uri}/sweep_{uuid.uuid4().hex[:8]}"
    (tmp / "grid.toml").write_text(GRID)
    out = tmp / "exp"
    done = cli_here(
        ["sweep", "--grid", str(tmp / "grid.toml"), "--sweep-id", "sw1", "--db", db, "--out", str(out), "--json"]
    )
    assert done.returncode == 0, done.stderr
    return {"db": db, "out": out, "tmp": tmp, "report": json.loads(done.stdout)}


def test_a_sweep_writes_one_row_per_episode_an_aggregate_per_configuration_and_a_plot(swept):
    report, sweep_dir = swept["report"], swept["out"] / "sw1"
    grid = json.loads((sweep_dir / "grid.json").read_text())
    n = len(grid["episodes"])
    assert n == 2 * 2 and report["summary"]["by_status"] == {"succeeded": n}  # 2 override sets x 2 windows
    rows = [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    assert [r["episode_id"] for r in rows] == [f"sw1-e{i:03d}" for i in range(n)]
    assert all(r["status"] == "succeeded" and r["decision_points"] > 0 and r["attempts"] == 1 for r in rows)
    assert len((sweep_dir / "results.csv").read_text().splitlines()) == n + 1
    agg = {a["config_key"]: a for a in report["aggregate"]}
    assert set(agg) == {
        "AAPL+MSFT memory=session model=configured base",
        "AAPL+MSFT memory=session model=configured loose",
    }
    for key, a in agg.items():
        mine = [r["total_return"] for r in rows if r["config_key"] == key]
        assert a["succeeded"] == 2 and a["total_return"]["mean"] == pytest.approx(sum(mine) / 2)
    assert (sweep_dir / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each episode's events are in the store, in the session the row names
    db = MongoClient(swept["db"]).get_default_database()
    for r in rows:
        assert db.state_events.count_documents({"session_id": r["session_id"]}) > 0


def test_a_finished_sweep_resumed_shows_its_table_without_starting_ray_and_stars_its_short_windows(swept):
    """Nothing left to run, so no Ray instance (one would make its folder under RAY_TMPDIR). The table never shows a
    ratio from a window too short to mean anything without a word: each Sharpe is starred and a warning names the
    configurations and their fewest decision points (the backtest's own threshold, SHORT_WINDOW_POINTS)."""
    ray_tmp = swept["tmp"] / "ray"
    sweep_dir = swept["out"] / "sw1"
    before = (sweep_dir / "results.jsonl").read_text()
    r = _run(  # a process of its own: in this one Ray is initialized (ray_here), and a sweep would join it
        ["sweep", "--resume", "sw1", "--db", swept["db"], "--out", str(swept["out"]), "--no-progress"],
        RAY_TMPDIR=str(ray_tmp),
        COLUMNS="160",
    )
    assert r.returncode == 0, r.stderr
    assert not ray_tmp.exists(), "a Ray instance was started for a sweep with nothing left to run"
    assert (sweep_dir / "results.jsonl").read_text() == before  # nothing ran again
    rows = [line for line in r.stdout.splitlines() if "2/2" in line]  # each configuration's row: 2 windows of 2
    assert len(rows) == 2
    for row in rows:
        sharpe = row.split("│")[4].strip()
        assert sharpe.endswith("*") and sharpe != "—*", row
    assert f"short windows: 2 configuration(s) completed a window of fewer than {SHORT_WINDOW_POINTS}" in r.stdout
    assert "base (4)" in r.stdout and "loose (4)" in r.stdout  # 20 sessions every 5: four decision points


def test_an_episode_inside_the_sweep_trades_exactly_as_the_same_backtest_alone(swept, tradegraph):
    sweep_dir = swept["out"] / "sw1"
    (ep,) = [
        e
        for e in json.loads((sweep_dir / "grid.json").read_text())["episodes"]
        if e["override"] == "loose" and e["index"] == 3
    ]  # the loose configuration's second window
    limits = swept["tmp"] / "loose.toml"
    limits.write_text("".join(f"{k} = {v}\n" for k, v in LOOSE.items()))
    alone = tradegraph(  # in process: the sweep's episodes ran in Ray's workers, this one apart from them
        "backtest",
        "--symbols",
        ",".join(ep["symbols"]),
        "--start",
        ep["start"],
        "--end",
        ep["end"],
        "--every",
        "5",
        "--fees-bps",
        "5",
        "--memory",
        "session",
        "--run-id",
        "alone",
        "--db",
        swept["db"],
        "--out",
        str(swept["tmp"] / "alone"),
        "--json",
        TRADEGRAPH_RISK_LIMITS=str(limits),
    )
    assert alone.returncode == 0, alone.stderr
    inside = sweep_dir / "episodes" / ep["episode_id"]
    theirs = json.loads((swept["tmp"] / "alone" / "alone" / "trade_history.json").read_text())
    mine = json.loads((inside / "trade_history.json").read_text())
    assert mine["trades"], "the loose limits should let the episode trade"
    assert mine == theirs
    steps = [json.loads(x) for x in (inside / "episode_log.jsonl").read_text().splitlines()]
    steps_alone = [
        json.loads(x) for x in (swept["tmp"] / "alone" / "alone" / "episode_log.jsonl").read_text().splitlines()
    ]
    assert [(s["date"], s["action"], s["equity"]) for s in steps] == [
        (s["date"], s["action"], s["equity"]) for s in steps_alone
    ]


# each episode alone sends 49-53 calls (4 points; AAPL's and MSFT's own), the two together ~102: under a limit of 75
# neither can spend it alone, so a sweep that sends exactly 75 has drawn on one budget from both workers, whichever
# started first (with a limit one episode could spend, a worker slow to start under load found it spent)
BUDGET = 75


def test_a_sweep_budget_holds_across_all_its_workers(embedded_uri, tmp_path, ray_here):
    db = f"{embedded_uri}/sweep_budget_{uuid.uuid4().hex[:8]}"
    done = cli_here(
        [
            "sweep",
            "--symbols",
            "AAPL",
            "--symbols",
            "MSFT",
            "--windows",
            "2011-01-03..2011-01-31",
            "--every",
            "5",
            "--workers",
            "2",
            "--max-llm-calls",
            str(BUDGET),
            "--sweep-id",
            "bud",
            "--db",
            db,
            "--out",
            str(tmp_path),
            "--json",
        ]
    )
    # a refused call fails its cycle: the sweep reports failed cycles and exits 1, never a clean run
    assert done.returncode == 1 and "cycle(s) failed" in done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["failed_cycles"] > 0
    events = MongoClient(db).get_default_database().state_events
    sessions = [r["session_id"] for r in map(json.loads, (tmp_path / "bud" / "results.jsonl").read_text().splitlines())]
    sent = events.count_documents({"session_id": {"$in": sessions}, "kind": "llm_request"})
    refused = list(events.find({"session_id": {"$in": sessions}, "kind": "error", "payload.type": "budget_exceeded"}))
    assert sent == BUDGET, "every call up to the sweep's limit was sent, and none past it"
    assert refused and {e["payload"]["scope"] for e in refused} == {"sweep"}
    per_episode = {s: events.count_documents({"session_id": s, "kind": "llm_request"}) for s in sessions}
    assert len(per_episode) == 2 and max(per_episode.values()) < BUDGET, (
        "neither episode could spend the limit alone: both drew on the one budget",
        per_episode,
    )

    # resumed with nothing left to run (no Ray started): the same spending, and the failed cycles still fail it
    again = _run(
        ["sweep", "--resume", "bud", "--db", db, "--out", str(tmp_path), "--json"], RAY_TMPDIR=str(tmp_path / "ray")
    )
    assert again.returncode == 1 and "cycle(s) failed" in again.stderr
    assert not (tmp_path / "ray").exists()
    assert json.loads(again.stdout)["summary"]["limits"] == report["summary"]["limits"]
    assert report["summary"]["limits"]["calls"] == BUDGET
