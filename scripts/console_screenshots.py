"""Screenshots of every page of the web console, written into docs/console/ (docs/console.md shows them; `make docs`
runs this after the text outputs).

    .venv/bin/python scripts/console_screenshots.py [--out docs/console]

A fresh in-memory store gets what the pages show: a session with an approved cycle, a session with a cycle paused
for approval (the approval screen), and a small backtest started as a task (and, with alpaca-py installed, the
tests' fake Alpaca paper account for the Broker page); `tradegraph serve`'s app then runs on a
loopback port and Debian's chromium (through Playwright) draws each page at 1280 px, and the approval screen at a
phone's 390 px too. Without playwright or chromium it says so and writes nothing (exit 0: the text outputs stand).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.console.server import browser, paused_cycle, serving, skip_reason  # noqa: E402


def build(kernel) -> dict[str, str]:
    """The sessions and the task the pages show; the paths to draw, by file name."""
    done = paused_cycle(kernel)
    kernel.call("approve", {"session_id": done.session_id, "approved": True, "by": "alice"})
    waiting = paused_cycle(kernel, as_of="2012-06-04")
    task = kernel.call(
        "start_backtest", {"symbols": ["AAPL", "MSFT"], "start": "2012-06-01", "end": "2012-06-29", "every": 5}
    )
    *_, last = kernel.watch(task.task_id)
    if last.status != "succeeded":
        raise RuntimeError(f"the screenshots' backtest {last.status}: {last.error}")
    return {
        "sessions.png": "/",
        "session.png": f"/ui/sessions/{done.session_id}",
        "cycle.png": f"/ui/sessions/{waiting.session_id}/cycles/1",
        "cycle-approved.png": f"/ui/sessions/{done.session_id}/cycles/1",
        "log.png": f"/ui/sessions/{done.session_id}/cycles/1/log",
        "runs.png": "/ui/runs",
        "run.png": f"/ui/runs/{task.task_id}",
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="console_screenshots.py", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "console"))
    args = ap.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"console_screenshots: skipped: {reason}", file=sys.stderr)
        return 0
    os.environ.setdefault("TRADEGRAPH_LLM", "offline")
    from database.connection import connect
    from graph.kernel.core import Kernel

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tg-console-shots-") as tmp:
        kernel = Kernel(
            connect(f"mongomock://console_shots_{uuid.uuid4().hex[:8]}"),
            experiments_dir=Path(tmp) / "experiments",
            env={"TRADEGRAPH_ALLOW_EXECUTION": "http"},
        )
        fake = None
        try:
            pages = build(kernel)
            fake = broker_fake()
            if fake is not None:
                pages["broker.png"] = "/ui/broker"
            with serving(kernel) as base, browser() as b:
                for width, suffix in ((1280, ""), (390, "-phone")):
                    page = b.new_page(viewport={"width": width, "height": 900}, device_scale_factor=1)
                    for name, path in pages.items():
                        if suffix and name not in ("cycle.png", "sessions.png"):
                            continue
                        page.goto(base + path)
                        target = out / name.replace(".png", f"{suffix}.png")
                        # the approval screen whole (it is the page a person reads); the others' first screen
                        page.screenshot(path=str(target), full_page=name in ("cycle.png", "run.png"))
                        print(
                            f"console_screenshots: wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}",
                            file=sys.stderr,
                        )
                    page.close()
        finally:
            kernel.close()
            if fake is not None:
                fake.stop()
    return 0


def broker_fake():
    """The Broker page needs a broker to show: the tests' fake Alpaca paper API on loopback (holding 10 MSFT), set
    as this process's broker; None without alpaca-py (the `broker` extra)."""
    try:
        import alpaca  # noqa: F401
    except ImportError:
        return None
    from tests.brokers.harness import start_fake
    from tests.fakes.fake_alpaca import KEY, SECRET

    fake = start_fake()
    os.environ.update(
        {"TRADEGRAPH_BROKER": "alpaca", "ALPACA_API_KEY": KEY, "ALPACA_SECRET_KEY": SECRET, "ALPACA_BASE_URL": fake.url}
    )
    return fake


if __name__ == "__main__":
    sys.exit(main())
