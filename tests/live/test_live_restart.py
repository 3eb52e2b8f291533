"""`tradegraph live` in a real process, SIGKILLed while its day's cycle waits for approval, the cycle approved while
it is dead, then started again: it resumes that day (reconciles it) instead of running it again, and the fake
Alpaca holds exactly one order per leg. The loop's clock is a fake one set in the child (no waiting for 09:35)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from typing import Any, Optional

import pytest

from agent.data.sources import KINDS
from tests.brokers.harness import start_fake
from tests.fakes.fake_alpaca import KEY, SECRET
from tests.integration.test_cli import ROOT, tg

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHILD = textwrap.dedent("""
    import functools, os, signal, sys, time
    # Ctrl-C as a terminal's foreground command has it: a test run started in the background by a script (no job
    # control) starts its children with SIGINT ignored, and Python then leaves it so
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from datetime import timedelta
    import pandas as pd
    from graph.transports.cli import live
    from graph.transports.cli.main import main
    if os.environ.get("FAKE_YAHOO_PORT"):  # yfinance talks to the test's fake Yahoo
        from tests.live.fake_yahoo import install
        install(int(os.environ["FAKE_YAHOO_PORT"]), os.environ["YF_CACHE"])
    if os.environ.get("DIE_AFTER"):  # SIGKILLed right after the day record reaches that state
        from database.live_days import LiveDays
        advance = LiveDays.advance
        def dying(self, key, was, state, **fields):
            moved = advance(self, key, was, state, **fields)
            if moved and state == os.environ["DIE_AFTER"]:
                os.kill(os.getpid(), signal.SIGKILL)
            return moved
        LiveDays.advance = dying
    t = [pd.Timestamp("2012-07-02 09:30", tz="America/New_York").tz_convert("UTC").to_pydatetime()]
    def sleep(s):
        time.sleep(0.05)
        t[0] += timedelta(seconds=s)
    live.cmd_live = functools.partial(live.cmd_live, now=lambda: t[0], sleep=sleep)
    sys.exit(main(sys.argv[1:]))
""")


@pytest.fixture
def fake(tmp_path, embedded_uri):
    fake: Any = start_fake()
    fake.db_uri = f"{embedded_uri}/live_{uuid.uuid4().hex[:8]}"
    fake.positions.clear()
    (tmp_path / "mandate.toml").write_text(
        'trading_hours = "00:00-23:59"\nmax_order_notional = 1e9\n'
        "max_position_notional = 1e9\nmax_gross_exposure = 1e9\n"
    )
    yield fake
    fake.stop()
    assert fake.peers <= {"127.0.0.1"}


def env_of(fake, tmp_path) -> dict[str, str]:
    return {
        "MONGODB_URI": fake.db_uri,
        "ALPACA_API_KEY": KEY,
        "ALPACA_SECRET_KEY": SECRET,
        "ALPACA_BASE_URL": fake.url,
        "TRADEGRAPH_MANDATE": str(tmp_path / "mandate.toml"),
        "TRADEGRAPH_BROKER_FILL_WAIT_S": "0.5",
    }


def loop(
    fake, tmp_path, *, approve_within: str = "2h", prices: bool = True, env_extra: Optional[dict[str, str]] = None
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "OPENAI_API_KEY", "TRADEGRAPH_LLM")}
    env.update({"TRADEGRAPH_HOME": str(tmp_path), "PYTHONPATH": ROOT, **env_of(fake, tmp_path), **(env_extra or {})})
    files = ["--prices", str(KINDS["prices"].bundled)] if prices else []
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            "live",
            "--broker",
            "alpaca",
            "--symbols",
            "AAPL,MSFT",
            "--name",
            "k",
            "--approve-within",
            approve_within,
            "--days",
            "1",
            *files,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_killed_while_waiting_for_approval_then_restarted_resumes_the_day_not_reruns_it(fake, tmp_path):
    first = loop(fake, tmp_path)
    seen = []
    assert first.stdout is not None
    for line in first.stdout:
        seen.append(line)
        if "waits for approval" in line:
            break
    assert any("waits for approval" in s for s in seen), (seen, first.stderr.read() if first.stderr else "")
    os.kill(first.pid, signal.SIGKILL)  # mid-day: the cycle is paused, the day record says `running`
    assert first.wait(timeout=30) == -signal.SIGKILL
    assert fake.orders == []
    ok = tg(["approve", "live-k", "--by", "alice", "--json"], tmp_path, env_extra=env_of(fake, tmp_path))
    assert ok.returncode == 0 and json.loads(ok.stdout)["status"] == "completed", ok.stdout + ok.stderr
    sent = len(fake.orders)
    assert sent >= 1

    again = loop(fake, tmp_path)
    out, err = again.communicate(timeout=180)
    assert again.returncode == 0, out + err
    assert "running the cycle" not in out and "2012-07-02: cycle live-k:c1 completed" in out, out
    assert "2012-07-02: reconciled, clean" in out, out
    cids = [o["client_order_id"] for o in fake.orders]
    assert len(fake.orders) == sent and len(set(cids)) == len(cids)  # one order per leg, none sent again
    evs = [
        json.loads(x) for x in tg(["events", "live-k"], tmp_path, env_extra=env_of(fake, tmp_path)).stdout.splitlines()
    ]
    assert {e["cycle_id"] for e in evs if e.get("cycle_id", "").startswith("live-k:c")} == {"live-k:c1"}
