"""What the backtest recovery faults share: a `tradegraph backtest` CLI run as a subprocess on a private embedded
store (its server started apart with `tradegraph store start`, so a test can SIGKILL and restart it), the moment
a cycle is under way frozen with SIGSTOP (so a fault lands mid-cycle every time, not when the timing allows), and
the comparison of a finished run with an uninterrupted run of the same config."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from pymongo import MongoClient

CLI = [sys.executable, "-m", "graph.transports.cli"]
RUN_ID = "k"
SESSION = f"bt-{RUN_ID}"
# 2 symbols, 10 decision points on the bundled data; loose limits so that it trades (17 fills, exits on stops,
# targets and horizons)
WINDOW = ["--symbols", "AAPL,MSFT", "--start", "2011-01-03", "--end", "2011-03-14", "--every", "5"]
# the same config as the kernel's input (a task over HTTP or in process)
TASK_INPUT = {
    "symbols": WINDOW[1].split(","),
    "start": WINDOW[3],
    "end": WINDOW[5],
    "every": int(WINDOW[7]),
    "run_id": RUN_ID,
}
LOOSE = "max_notional_pct = 60\nexposure_cap_pct = 100\n"
VERDICT = re.compile(r"^cycle (\S+): (IDENTICAL|DIVERGED|SKIPPED)\s+\((\d+) state", re.M)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class PrivateStore:
    """An embedded store under its own TRADEGRAPH_HOME, running apart from the commands that use it."""

    def __init__(self, root: Path):
        self.home = root / "home"
        limits = root / "loose.toml"
        limits.write_text(LOOSE)
        env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
        self.env = {
            **env,
            "TRADEGRAPH_HOME": str(self.home),
            "TRADEGRAPH_LLM": "offline",
            "TRADEGRAPH_RISK_LIMITS": str(limits),
            "COLUMNS": "250",
        }

    def settings(self) -> dict[str, str]:
        """The variables that point a command at this store, for a step run in process (cli_here)."""
        return {k: self.env[k] for k in ("TRADEGRAPH_HOME", "TRADEGRAPH_RISK_LIMITS", "COLUMNS")}

    def cli(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(CLI + list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def start(self) -> int:
        out = self.cli("store", "start")
        assert out.returncode == 0, out.stderr
        return self.port()

    def stop(self) -> None:
        self.cli("store", "stop")

    def state(self) -> dict:
        return json.loads((self.home / "server.json").read_text())

    def port(self) -> int:
        return int(self.state()["port"])

    def kill(self) -> None:
        os.kill(int(self.state()["pid"]), signal.SIGKILL)

    def db(self):
        return MongoClient(f"mongodb://127.0.0.1:{self.port()}", serverSelectionTimeoutMS=5000).tradegraph

    def spooled_ids(self) -> set[str]:
        """event_ids waiting in the spool (after each file's header line)."""
        ids = set()
        for f in (self.home / "spool").glob("*.jsonl"):
            rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
            ids |= {r["event_id"] for r in rows[1:]}
        return ids

    def popen(self, *argv: str) -> subprocess.Popen:
        # SIGINT restored for the child: a background CI job starts its children with it ignored
        return subprocess.Popen(
            CLI + list(argv),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def backtest(out: Path) -> list[str]:
    """`tradegraph backtest`'s arguments for the shared config, logging under out/RUN_ID."""
    return ["backtest", *WINDOW, "--run-id", RUN_ID, "--json", "--out", str(out)]


def reached(db, cycle_id: str, state: str = "END") -> bool:
    """The store holds the cycle's transition into `state` (END: the cycle is over)."""
    return (
        db.state_events.count_documents(
            {"session_id": SESSION, "cycle_id": cycle_id, "kind": "transition", "payload.to": state}
        )
        > 0
    )


def under_way(db, log: Path) -> Optional[str]:
    """A cycle past the logged points that has asked the model already."""
    logged = [d["agent_output"]["cycle_id"] for d in lines(log)]
    asked = db.state_events.find_one(
        {"session_id": SESSION, "kind": "llm_request", "cycle_id": {"$nin": logged}}, {"cycle_id": 1}
    )
    return None if asked is None else asked["cycle_id"]


def freeze_mid_cycle(
    proc: subprocess.Popen, db, log: Path, *, after: int, before: str = "END", timeout_s: float = 300
) -> Optional[str]:
    """SIGSTOP `proc` at an instant when, past at least `after` logged points, a cycle is under way: it asked the
    model already, the store has no transition of it into `before` and its point is not logged. Returns that
    cycle's id with the process stopped (the caller injects its fault, then SIGCONTs it); None if the run ended
    first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        done = len(lines(log))
        if done >= after and under_way(db, log) is not None:
            os.kill(proc.pid, signal.SIGSTOP)
            cycle = under_way(db, log)  # checked again, frozen: nothing moves now
            if len(lines(log)) == done and cycle is not None and not reached(db, cycle, before):
                return cycle
            os.kill(proc.pid, signal.SIGCONT)  # too late in that cycle: wait for the next one
        time.sleep(0.02)
    return None


def interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C, sent to the process's main thread (tgkill): Python runs its handler there, and a SIGINT the kernel
    hands another thread waits for the main thread's next wake-up (up to the CLI's 0.2 s poll), while the cycle
    under way goes on; this keeps the test's timing to the handler's own. Elsewhere: the process."""
    import ctypes

    tgkill = getattr(ctypes.CDLL(None, use_errno=True), "tgkill", None)
    if tgkill is None or tgkill(proc.pid, proc.pid, signal.SIGINT) != 0:
        proc.send_signal(signal.SIGINT)


def verdicts(verify_stdout: str) -> dict[str, tuple[str, int]]:
    return {c: (mark, int(n)) for c, mark, n in VERDICT.findall(verify_stdout)}


def compare_with_uninterrupted(run_dir: Path, alone_dir: Path) -> dict[str, int]:
    """The finished run against the uninterrupted one: the same fills, byte for byte, and the same action and
    equity at every decision point, each point decided by a cycle that completed. Returns the counts (asserted 0)
    docs/audit.md's faults table quotes."""
    steps, alone = lines(run_dir / "episode_log.jsonl"), lines(alone_dir / "episode_log.jsonl")
    assert [s["decision_point_idx"] for s in steps] == list(range(len(alone)))
    points = lambda log: [(s["date"], s["action"], s["equity"]) for s in log]  # noqa: E731
    counts = {
        # a point whose equity or action differs from the uninterrupted run's: an update lost or doubled
        "points_differing": sum(a != b for a, b in zip(points(steps), points(alone))) + abs(len(steps) - len(alone)),
        # a point logged from a cycle that did not complete (failed on the store, executed_with_errors, cut)
        "points_not_completed": sum(s["agent_output"]["cycle_status"] != "completed" for s in steps),
    }
    assert (run_dir / "trade_history.json").read_bytes() == (alone_dir / "trade_history.json").read_bytes()
    assert counts == {"points_differing": 0, "points_not_completed": 0}, counts
    return counts


def verify_as_uninterrupted(store: PrivateStore, cut: str, alone_verdicts: dict[str, tuple[str, int]]) -> None:
    """`replay --verify` of the recovered session: exit 0 (chain intact), the superseded cycle identical as far as
    it recorded and said to be superseded, every other cycle with the uninterrupted run's verdict, in order. Run in
    process (cli_here): the recovery under test is the backtest's; a verify is the same in any process."""
    from tests.helpers import cli_here

    verify = cli_here(["replay", SESSION, "--verify"], store.settings())
    assert verify.returncode == 0, verify.stdout + verify.stderr
    mine = verdicts(verify.stdout)
    assert mine.pop(cut)[0] == "IDENTICAL" and "recorded cycle is superseded" in verify.stdout, verify.stdout
    assert list(mine.values()) == list(alone_verdicts.values()), "the decided cycles verify as the uninterrupted"


def stored_ids(db) -> set[str]:
    return {e["event_id"] for e in db.state_events.find({"session_id": SESSION}, {"event_id": 1})}


def superseded_cycles(db) -> list[str]:
    return [
        e["cycle_id"]
        for e in db.state_events.find({"session_id": SESSION, "kind": "error", "payload.type": "cycle_superseded"})
    ]
