"""Sweeps without Ray: the grid's expansion and windows, bad grids named, the aggregate's honesty, and the shared
limits (rate buckets and one budget across episodes) as the Ray actor runs them."""

from __future__ import annotations

import math

import pytest

from agent.budget import CallBudgetExceeded, TokenBudgetExceeded
from agent.markets import trading_days
from graph.kernel.errors import BadInput
from graph.kernel.models import SweepInput
from graph.services.sweep.grid import GridError, expand, grid_hash, rolling_windows, walk_forward_windows
from graph.services.sweep.limits import SharedLimits, SweepBudget
from graph.services.sweep.results import GridChanged, aggregate, write_grid


def _grid(**kw) -> SweepInput:
    base = dict(
        universes=[["AAPL", "MSFT"], ["IBM"]],
        memory=["off", "session"],
        windows={"kind": "rolling", "start": "2012-01-03", "end": "2012-06-29", "length": 42, "step": 21},
        overrides=[{"label": "base"}, {"label": "tight", "max_positions": 1, "fees_bps": 10}],
    )
    base.update(kw)
    return SweepInput.model_validate(base)


def test_the_grid_is_configurations_times_windows_in_a_fixed_order():
    eps = expand(_grid(), "s")
    windows = rolling_windows("us_equity", "2012-01-03", "2012-06-29", 42, 21)
    assert len(eps) == 2 * 2 * 2 * len(windows)
    assert [e.episode_id for e in eps] == [f"s-e{i:03d}" for i in range(len(eps))]
    keys = list(dict.fromkeys(e.config_key for e in eps))
    assert len(keys) == 8 and all(sum(e.config_key == k for e in eps) == len(windows) for k in keys)
    tight = [e for e in eps if e.override_label == "tight"]
    assert all(e.fees_bps == 10 and e.risk == {"max_positions": 1} for e in tight)
    assert all(e.fees_bps == 1.0 and e.risk == {} for e in eps if e.override_label == "base")
    assert grid_hash(eps) == grid_hash(expand(_grid(), "s")) != grid_hash(expand(_grid(every=10), "s"))


def test_rolling_windows_count_trading_sessions_and_overlap_by_step():
    days = [d.strftime("%Y-%m-%d") for d in trading_days("us_equity", "2012-01-03", "2012-06-29")]
    ws = rolling_windows("us_equity", "2012-01-03", "2012-06-29", 42, 21)
    assert ws[0].start == days[0] and ws[0].end == days[41] and ws[1].start == days[21]
    assert len(ws) == (len(days) - 42) // 21 + 1 and ws[-1].end <= days[-1]
    # 2012-01-16 (MLK day) is no session: a 10-session window starting the 9th ends the 23rd, not the 20th
    (w,) = rolling_windows("us_equity", "2012-01-09", "2012-01-23", 10, 10)
    assert (w.start, w.end) == ("2012-01-09", "2012-01-23")


def test_walk_forward_windows_follow_their_in_sample_span_back_to_back():
    days = [d.strftime("%Y-%m-%d") for d in trading_days("us_equity", "2012-01-03", "2012-12-31")]
    ws = walk_forward_windows("us_equity", "2012-01-03", "2012-12-31", train=60, test=40)
    assert ws[0].in_sample == (days[0], days[59]) and ws[0].start == days[60] and ws[0].end == days[99]
    for a, b in zip(ws, ws[1:]):
        assert days.index(b.start) == days.index(a.end) + 1  # out-of-sample windows never overlap
        assert b.in_sample[1] == days[days.index(b.start) - 1]
    assert len(ws) == (len(days) - 60) // 40


@pytest.mark.parametrize(
    "kw, named",
    [
        (dict(universes=[["AAPL", "aapl"]]), "AAPL"),
        (dict(memory=["off", "off"]), "twice"),
        (
            dict(windows={"kind": "rolling", "start": "2012-01-03", "end": "2012-01-31", "length": 400, "step": 5}),
            "400",
        ),
        (
            dict(windows={"kind": "walk_forward", "start": "2012-01-03", "end": "2012-02-28", "train": 30, "test": 30}),
            "train 30",
        ),
        (dict(windows={"kind": "list", "spans": [["2012-03-01", "2012-02-01"]]}), "2012-03-01..2012-02-01"),
        (dict(overrides=[{"label": "a"}, {"label": "a", "fees_bps": 3}]), "repeat"),
    ],
)
def test_a_bad_grid_is_one_error_naming_the_value(kw, named):
    with pytest.raises(GridError) as e:
        expand(_grid(**kw), "s")
    assert named in str(e.value) and "\n" not in str(e.value)


def test_a_sweep_id_resumes_only_on_the_grid_it_started_with(tmp_path):
    eps = expand(_grid(), "s")
    write_grid(tmp_path / "s", {}, eps, grid_hash(eps))
    write_grid(tmp_path / "s", {}, eps, grid_hash(eps))  # the same grid: a resume
    other = expand(_grid(every=10), "s")
    with pytest.raises(GridChanged, match="another grid"):
        write_grid(tmp_path / "s", {}, other, grid_hash(other))


def _row(key, status, ret, dd, bench, failed_cycles=0):
    return {
        "config_key": key,
        "status": status,
        "total_return": ret,
        "sharpe": 1.0,
        "max_drawdown": dd,
        "benchmark_total_return": bench,
        "excess_return": None if ret is None else ret - bench,
        "failed_cycles": failed_cycles,
        "decision_points": 10,
        "llm_usd": None,
    }


def test_the_aggregate_counts_failures_and_keeps_them_out_of_the_figures():
    rows = [
        _row("a", "succeeded", 0.10, 0.05, 0.02),
        _row("a", "succeeded", -0.02, 0.08, 0.04),
        _row("a", "failed", None, None, 0.01, failed_cycles=3),
        _row("b", "succeeded", 0.01, 0.01, 0.03, 1),
    ]
    a, b = aggregate(rows)
    assert (a["episodes"], a["succeeded"], a["failed_episodes"], a["failed_cycles"]) == (3, 2, 1, 3)
    assert a["total_return"]["median"] == pytest.approx(0.04) and a["total_return"]["min"] == -0.02
    assert a["total_return"]["stdev"] == pytest.approx(math.sqrt(((0.06) ** 2 + (0.06) ** 2) / 1))
    assert a["beat_benchmark"] == 1 and a["benchmark_total_return"]["mean"] == pytest.approx(0.03)
    assert (b["succeeded"], b["failed_cycles"], b["beat_benchmark"]) == (1, 1, 0)


def test_rate_buckets_hold_requests_and_tokens_per_provider_across_callers():
    now = [0.0]
    lim = SharedLimits(requests_per_minute=2, tokens_per_minute=3000, clock=lambda: now[0])
    assert lim.acquire("openai", 1000) == 0.0 and lim.acquire("openai", 1000) == 0.0
    wait = lim.acquire("openai", 1000)
    assert wait == pytest.approx(30.0)  # the third request of the minute waits for one to refill
    assert lim.acquire("anthropic", 1000) == 0.0  # another provider has its own buckets
    now[0] = 30.0
    assert lim.acquire("openai", 1000) == 0.0
    now[0] = 31.0  # one request refilled by 1/30 since: (1 - 1/30) of a request's 30 s still to wait
    assert lim.acquire("openai", 10) == pytest.approx(29.0)
    tokens = SharedLimits(tokens_per_minute=3000, clock=lambda: 0.0)
    assert tokens.acquire("openai", 2000) == 0.0
    assert tokens.acquire("openai", 2000) == pytest.approx(20.0)  # 1000 left, 1000 more at 50 a second
    assert tokens.acquire("openai", 1000) == 0.0, "a request told to wait took nothing from the bucket"


def test_one_budget_holds_across_episodes_and_a_retry_is_not_counted_twice():
    lim = SharedLimits(max_llm_calls=5, max_tokens=10_000)
    a = SweepBudget(lim, "e0", lambda m: None, call=lambda v: v)
    b = SweepBudget(lim, "e1", lambda m: None, call=lambda v: v)
    for budget in (a, b, a):
        held = budget.reserve(100, 100, None, "offline-quick")
        budget.settle(held, 150, 0.0)
    assert lim.budget.calls == 3 and lim.budget.tokens == 450
    # e0 retried by Ray after its worker died: its log says it spent 2 calls / 300 tokens, already counted live
    a.spent(300, 0.0, 2)
    assert lim.budget.calls == 3 and lim.budget.tokens == 450
    # a resumed sweep's new actor learns what e1 spent before it existed
    b.spent(150, 0.0, 1)
    fresh = SharedLimits(max_llm_calls=5)
    SweepBudget(fresh, "e1", lambda m: None, call=lambda v: v).spent(150, 0.0, 1)
    assert fresh.budget.calls == 1
    b.reserve(10, 10, None, "m")
    a.reserve(10, 10, None, "m")
    with pytest.raises(CallBudgetExceeded) as e:
        b.reserve(10, 10, None, "m")
    assert e.value.scope == "sweep" and "5" in str(e.value)
    big = SweepBudget(SharedLimits(max_tokens=1000), "e2", lambda m: None, call=lambda v: v)
    with pytest.raises(TokenBudgetExceeded):
        big.reserve(900, 200, None, "m")


def test_a_mongomock_store_cannot_run_a_sweep():
    from database import connect
    from graph.kernel.sweep_tasks import store_address

    with pytest.raises(BadInput, match="mongomock"):
        store_address(connect("mongomock://sweep_refused"))


def test_a_multi_node_cluster_on_the_embedded_store_is_refused_in_one_line():
    from graph.services.sweep.driver import SweepError, SweepPlan, check_cluster
    from graph.services.sweep.episode import SweepContext

    plan = SweepPlan(episodes=[], ctx=SweepContext("s", None, "/tmp", None, "/tmp/home"), workers=2)
    check_cluster(plan, [{"Alive": True}, {"Alive": False}])  # one live node: this machine, fine
    with pytest.raises(SweepError) as e:
        check_cluster(plan, [{"Alive": True}, {"Alive": True}])
    assert "MONGODB_URI" in str(e.value) and "2 nodes" in str(e.value)
    plan.ctx.store_uri = "mongodb://db.internal:27017/tradegraph"
    check_cluster(plan, [{"Alive": True}, {"Alive": True}])


def test_a_worker_told_to_wait_sleeps_until_the_minute_allows_its_request():
    now, slept = [0.0], []
    lim = SharedLimits(requests_per_minute=2, clock=lambda: now[0])

    def sleep(s):
        slept.append(s)
        now[0] += s

    budget = SweepBudget(lim, "e0", lambda model: "openai", call=lambda v: v, sleep=sleep)
    for _ in range(3):
        budget.reserve(10, 10, None, "gpt-4o-mini")
    assert sum(slept) == pytest.approx(30.0) and max(slept) <= 5.0 and lim.waits == len(slept)
    offline = SweepBudget(
        SharedLimits(requests_per_minute=1, clock=lambda: 0.0), "e1", lambda model: None, call=lambda v: v, sleep=sleep
    )
    before = len(slept)
    for _ in range(3):
        offline.reserve(10, 10, None, "offline-quick")
    assert len(slept) == before, "the offline model is never rate limited"


def _cli(argv, capsys):
    from graph.transports.cli.main import main

    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--symbols", "AAPL", "--windows", "bogus"], "--windows 'bogus'"),
        (["--symbols", "ZZZ", "--windows", "2012-01-03..2012-02-28"], "ZZZ"),
        (["--windows", "2012-01-03..2012-02-28"], "--symbols"),
        (["--grid", "/nonexistent/grid.toml"], "/nonexistent/grid.toml"),
        (["--symbols", "AAPL", "--windows", "2012-01-03..2012-02-28", "--workers", "0"], "workers"),
        (["--symbols", "AAPL", "--windows", "rolling:2012-01-03:2012-02-28:5:0"], "step"),
        (["--resume", "never-ran"], "never-ran"),
    ],
)
def test_a_bad_sweep_is_refused_in_one_line_with_exit_2_and_nothing_written(argv, named, tmp_path, capsys):
    code, err = _cli(["sweep", *argv, "--db", "mongomock://sweep_cli", "--out", str(tmp_path)], capsys)
    assert code == 2 and len(err) == 1 and named in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_key_in_a_grid_file_is_named(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text('univers = [["AAPL"]]\n[windows]\nkind = "list"\nspans = [["2012-01-03", "2012-02-28"]]\n')
    code, err = _cli(
        ["sweep", "--grid", str(grid), "--db", "mongomock://sweep_cli", "--out", str(tmp_path / "x")], capsys
    )
    assert code == 2 and len(err) == 1 and "univers" in err[0], err


def test_a_sweep_on_a_store_other_processes_cannot_reach_is_refused(tmp_path, capsys):
    code, err = _cli(
        [
            "sweep",
            "--symbols",
            "AAPL",
            "--windows",
            "2012-01-03..2012-02-28",
            "--db",
            "mongomock://sweep_cli",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 2 and "mongomock" in err[0] and list(tmp_path.iterdir()) == []


def test_a_remote_caller_cannot_point_the_server_at_a_ray_cluster():
    from database import connect
    from graph.kernel.core import Kernel
    from graph.kernel.errors import Forbidden

    k = Kernel(connect("mongomock://sweep_policy"))
    grid = {
        "universes": [["AAPL"]],
        "windows": {"kind": "list", "spans": [["2012-01-03", "2012-02-28"]]},
        "ray_address": "ray://elsewhere:10001",
    }
    for transport in ("http", "mcp"):
        with pytest.raises(Forbidden, match="ray_address"):
            k.call("start_sweep", grid, transport=transport)


def test_an_answered_call_settles_on_the_sweeps_shared_budget_as_on_a_runs_own():
    """A cycle settles each answered call with settle_answer (its reported usage checked first): a sweep's episodes
    hand it the shared limits (SweepBudget), which must take the same call (an AttributeError failed every answered
    call of a sweep or benchmark run with a limit)."""
    lim = SharedLimits(max_llm_calls=5, max_tokens=10_000)
    budget = SweepBudget(lim, "e0", lambda m: None, call=lambda v: v)
    held = budget.reserve(100, 100, None, "offline-quick")
    assert budget.settle_answer(held, {"input_tokens": 100, "output_tokens": 50, "total_tokens": 150}, 0.0) is None
    assert lim.budget.calls == 1 and lim.budget.tokens == 150
    held = budget.reserve(100, 100, None, "offline-quick")
    problem = budget.settle_answer(held, {"input_tokens": -1, "output_tokens": 50, "total_tokens": 49}, 0.0)
    assert problem is not None and lim.budget.tokens == 150 + 200  # not believed: counted as the reservation
