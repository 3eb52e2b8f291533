"""The simulation loop end to end (offline model, mongomock): determinism, resume, no look-ahead, no metadata."""

from __future__ import annotations

import json
import re
import uuid

import numpy as np
import pytest

from agent.config import AgentConfig, RiskLimits
from agent.data.market import MarketData, default_market_data
from database import connect
from graph.machine.cycle_context import default_services
from graph.services.backtest.loop import load_logs, run_backtest
from graph.transports.cli.main import main as cli_main
from schemas.simulation import EpisodeConfig

TICKERS = ["AAPL", "MSFT"]
# loose enough that the offline agent's sizing passes VALIDATING, so trades actually happen
RISK = RiskLimits(max_notional_pct=60.0, exposure_cap_pct=100.0)


def _config(run_id="ep", **kw) -> EpisodeConfig:
    base = dict(
        episode_id=run_id,
        tickers=TICKERS,
        initial_cash=100_000.0,
        start="2011-01-03",
        end="2011-03-31",
        every=5,
        bars_in_case=5,
    )
    base.update(kw)
    return EpisodeConfig(**base)


def _services(market=None):
    return default_services(AgentConfig.from_env(risk=RISK), **({"market": market} if market is not None else {}))


@pytest.fixture
def mstore():
    name = f"bt_{uuid.uuid4().hex[:10]}"
    s = connect(f"mongomock://{name}")
    yield s
    s.client.drop_database(name)
    s.close()


def _run(tmp_path, sub, run_id="ep", store=None, **kw):
    s = store or connect(f"mongomock://bt_{uuid.uuid4().hex[:10]}")
    services = kw.pop("services", None) or _services()
    cfg = kw.pop("config", None) or _config(run_id)
    res = run_backtest(cfg, s, progress=False, services=services, out_dir=tmp_path / sub, run_id=run_id, **kw)
    return res, tmp_path / sub / run_id


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """(result, run dir) of the module's reference run: the default config, uninterrupted, on a store of its own.
    Made once: five tests compare with it (it was run six times, ~60 s each under a full run's load)."""
    return _run(tmp_path_factory.mktemp("full"), "full")


def test_episode_writes_logs_and_trades(full):
    res, d = full
    logs = load_logs(d / "episode_log.jsonl")
    assert res.decision_points == len(logs) == 13
    assert [lg.decision_point_idx for lg in logs] == list(range(13))
    assert all(lg.case_id == f"ep:{i}" for i, lg in enumerate(logs))
    assert res.trade_history.trades, "the relaxed risk limits should let the offline agent trade"
    # every step records the portfolio carried forward, trade or not
    for prev, cur in zip(logs, logs[1:]):
        assert cur.portfolio_before == prev.portfolio_after
        if cur.action != "trade" and not cur.exits:
            assert cur.portfolio_after.cash == cur.portfolio_before.cash
            assert cur.portfolio_after.positions == cur.portfolio_before.positions
        for ex in cur.exits:  # closed on its levels before the decision: gone from the book after it
            assert ex.reason in ("stop", "target", "horizon") and ex.side == "SELL"
            assert (
                ex.symbol in cur.portfolio_before.positions
                and ex.symbol not in cur.portfolio_after.positions
                or cur.action == "trade"
            )
    assert any(lg.exits for lg in logs), "a 13-point episode with 10-session horizons should close a position"
    th = json.loads((d / "trade_history.json").read_text())
    assert len(th["trades"]) == len(res.trade_history.trades)
    assert json.loads((d / "config.json").read_text())["tickers"] == TICKERS
    assert res.metrics["num_trades"] == len(res.trade_history.trades)
    assert res.benchmark_metrics["start_equity"] == pytest.approx(100_000.0)
    assert (d / "result.json").exists()


def test_same_config_twice_is_byte_identical(tmp_path, full):
    _, d1 = full
    _, d2 = _run(tmp_path, "two")
    assert (d1 / "trade_history.json").read_bytes() == (d2 / "trade_history.json").read_bytes()


def test_resume_after_kill_is_byte_identical(tmp_path, full):
    _, full = full
    store = connect(f"mongomock://bt_{uuid.uuid4().hex[:10]}")
    # a "kill" after 4 steps: max_steps stops cleanly ...
    part, d = _run(tmp_path, "resumed", store=store, max_steps=4)
    assert part.decision_points == 4 and not (d / "result.json").exists()

    # ... then a crash raised mid-run after 3 more, leaving a torn line behind
    class Boom(Exception):
        pass

    def crash(entry):
        if entry.decision_point_idx == 6:
            raise Boom

    with pytest.raises(Boom):
        _run(tmp_path, "resumed", store=store, on_step=crash)
    with open(d / "episode_log.jsonl", "a") as f:
        f.write('{"case_id": "ep:7", "decision_')
    res, _ = _run(tmp_path, "resumed", store=store)
    assert res.decision_points == 13
    assert [lg.decision_point_idx for lg in load_logs(d / "episode_log.jsonl")] == list(range(13))
    assert (d / "trade_history.json").read_bytes() == (full / "trade_history.json").read_bytes()


def test_a_cycle_cut_off_before_its_log_line_is_superseded_and_its_notes_withdrawn(tmp_path, full):
    """What a kill between MEMORIZING and the log line leaves: the point's whole cycle in the audit and its
    notes in memory, the point unlogged. The resumed run must decide as an uninterrupted one (before the fix
    it recalled the cut-off cycle's notes and its convictions drifted) and say in the audit what it dropped."""
    _, full = full
    store = connect(f"mongomock://bt_{uuid.uuid4().hex[:10]}")
    _, d = _run(tmp_path, "cut", store=store, max_steps=4)
    log = d / "episode_log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]))  # point 3's cycle ran to its end; its line never landed
    session = "bt-ep"
    cut = store.events.cycle_ids(session)[3]
    assert [m for m in store.memories.list(session_id=session, limit=0) if m.cycle_id == cut], (
        "the cut-off cycle memorised notes (else this test proves nothing)"
    )

    res, _ = _run(tmp_path, "cut", store=store)
    assert [lg.decision_point_idx for lg in load_logs(log)] == list(range(res.decision_points))
    assert (d / "trade_history.json").read_bytes() == (full / "trade_history.json").read_bytes()
    assert [lg.extracted_decision for lg in load_logs(log)] == [
        lg.extracted_decision for lg in load_logs(full / "episode_log.jsonl")
    ]
    (mark,) = [e for e in store.events.read(session, kind="error") if e["payload"].get("type") == "cycle_superseded"]
    assert mark["cycle_id"] == cut and mark["payload"]["decision_point_idx"] == 3
    assert mark["payload"]["withdrawn_memories"] and not [
        m for m in store.memories.list(session_id=session, limit=0) if m.cycle_id == cut
    ]
    _run(tmp_path, "cut", store=store)  # a second resume marks nothing twice
    assert (
        len([e for e in store.events.read(session, kind="error") if e["payload"].get("type") == "cycle_superseded"])
        == 1
    )


def test_resume_refuses_a_different_config(tmp_path):
    _run(tmp_path, "x", max_steps=1)
    from graph.services.backtest.loop import BacktestError

    with pytest.raises(BacktestError, match="different config"):
        _run(tmp_path, "x", config=_config(fees_bps=5.0))


def test_no_look_ahead(tmp_path, full):
    """Perturbing every bar after t changes nothing decided up to t."""
    t = "2011-02-15"
    real = default_market_data()
    frames = {}
    rng = np.random.default_rng(0)
    for s in TICKERS:
        f = real.bars(s).copy()
        after = f.index > np.datetime64(t)
        factor = rng.uniform(0.5, 1.8, after.sum())
        for c in ("open", "high", "low", "close"):
            f.loc[after, c] = f.loc[after, c] * factor
        f.loc[after, "volume"] = f.loc[after, "volume"] * 3
        frames[s] = f
    perturbed = MarketData(frames, source="perturbed")
    _, d1 = full  # the real data's run
    _, d2 = _run(tmp_path, "perturbed", services=_services(perturbed))
    a, b = load_logs(d1 / "episode_log.jsonl"), load_logs(d2 / "episode_log.jsonl")
    before = [i for i, lg in enumerate(a) if lg.date <= t]
    assert len(before) >= 5 and len(before) < len(a)
    for i in before:
        assert a[i].model_dump() == b[i].model_dump(), f"decision point {i} ({a[i].date}) changed"
    # the perturbation is real: something after t differs
    assert any(a[i].prices != b[i].prices for i in range(len(before), len(a)))


def test_prompts_carry_no_case_metadata_and_no_future_dates(tmp_path, mstore):
    _, d = _run(tmp_path, "meta", store=mstore, run_id="meta", config=_config("meta", end="2011-02-10"))
    logs = load_logs(d / "episode_log.jsonl")
    date_of = {lg.agent_output["cycle_id"]: lg.date for lg in logs}
    requests = list(mstore.events.read("bt-meta", kind="llm_request"))
    assert requests
    seen = set()
    for ev in requests:
        text = json.dumps(ev["payload"].get("messages", ev["payload"]))
        assert "information_cutoff_timestamp" not in text and "decision_point_idx" not in text
        cutoff = date_of[ev["cycle_id"]]
        seen.add(ev["cycle_id"])
        late = [x for x in re.findall(r"\d{4}-\d{2}-\d{2}", text) if x > cutoff]
        assert not late, f"cycle {ev['cycle_id']} (cutoff {cutoff}) prompt mentions {late[:3]}"
    assert seen == set(date_of)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--symbols", "AAPL,NOPE"], "NOPE"),
        (["--symbols", "AAPL", "--start", "2012-01-01", "--end", "2011-01-01"], "2012-01-01"),
        (["--symbols", "AAPL", "--start", "1990-01-02"], "1990-01-02"),
        (["--symbols", "AAPL", "--capital", "-1"], "--capital"),
        (["--symbols", "AAPL", "--fees-bps", "-2"], "--fees-bps"),
        (["--symbols", "AAPL", "--slippage-bps", "-3"], "--slippage-bps"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, capsys, argv, needle):
    args = {"--start": "2011-01-03", "--end": "2011-02-01"}
    flat = list(argv)
    for k, v in args.items():
        if k not in flat:
            flat += [k, v]
    code = cli_main(["backtest", *flat, "--db", "mongomock://bt_cli", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0]


def test_cli_runs_json_and_plot(tmp_path, capsys):
    png = tmp_path / "eq.png"
    code = cli_main(
        [
            "backtest",
            "--symbols",
            "AAPL,MSFT",
            "--start",
            "2011-01-03",
            "--end",
            "2011-02-15",
            "--every",
            "10",
            "--run-id",
            "clitest",
            "--json",
            "--plot",
            str(png),
            "--db",
            f"mongomock://bt_{uuid.uuid4().hex[:8]}",
            "--out",
            str(tmp_path / "exp"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["run_id"] == "clitest" and out["decision_points"] == 4
    assert {"sharpe", "max_drawdown", "hit_rate"} <= set(out["metrics"]) and png.stat().st_size > 1000
    # the task's own plot of the complete run, not a second drawing
    assert png.read_bytes() == (tmp_path / "exp" / "clitest" / "equity.png").read_bytes()


def test_failed_cycles_are_counted_named_and_fail_the_run(tmp_path, capsys, monkeypatch):
    """An unreachable model: every cycle fails. Before, the table showed a flat +0.00% agent and exit 0."""
    monkeypatch.setenv("TRADEGRAPH_LLM", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens on port 9
    monkeypatch.setenv("TRADEGRAPH_LLM_RETRIES", "0")
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
    ]
    code = cli_main(argv + ["--run-id", "down"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 1 and out["decision_points"] == 6
    assert out["actions"] == {"failed": 6} and out["cycle_statuses"] == {"failed": 6}
    assert len(out["failed_points"]) == 6 and all(p["error"] for p in out["failed_points"])
    assert "6 of 6 cycle(s) failed" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert any(w.startswith("short window") for w in out["warnings"])
    assert out["benchmark"]["kind"] == "buy_and_hold" and out["benchmark"]["tickers"] == ["AAPL"]
    # the same run, with failures allowed explicitly: exit 0, still reported
    assert cli_main(argv + ["--run-id", "down", "--allow-failures", "6"]) == 0
    assert json.loads(capsys.readouterr().out)["actions"] == {"failed": 6}
    # the table: the headline names the failures, the agent's column says its figures cover no decision,
    # and the short-window warning sits under the figures
    monkeypatch.setenv("COLUMNS", "250")
    assert cli_main([a for a in argv if a != "--json"] + ["--run-id", "down"]) == 1
    table = " ".join(capsys.readouterr().out.split())  # rich wraps long cells; the words are what count
    assert "6 FAILED" in table and "0 held" in table and "agent (6 of 6 points failed)" in table
    assert "warning: short window: 6 decision point(s)" in table
