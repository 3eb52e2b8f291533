"""Record real sessions as test fixtures (tests/fixtures/recordings/), as Temporal keeps histories for its replayer.

Run: .venv/bin/python scripts/record_fixtures.py [--out DIR] [--tag TAG]

Each file is one session's `state_events` exactly as `EventStore.read` returns them (packs rebuilt; seq, prev_hash and
hash as stored), gzipped JSON lines after a header line naming how it was made (this script, the commit, the schema
version). tests/unit/test_recorded_sessions.py loads each into a fresh store, parses every event with parse_event and
verifies the session by re-executing it with today's code: a change that breaks old recordings fails there. Record a
new set when the format changes (a new `--tag`), and keep the old ones: they are what the upcasters must still read.

Everything runs offline: the offline model, the bundled price files, an in-memory (mongomock) store; the sessions are
small (one or two symbols) so the fixtures stay a few hundred KiB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.config import AgentConfig, RiskLimits  # noqa: E402
from database.connection import connect  # noqa: E402
from graph.machine.cycle_context import default_services  # noqa: E402
from graph.machine.runner import approve_cycle, run_state_machine  # noqa: E402
from graph.services.backtest.loop import run_backtest, session_id_of  # noqa: E402
from schemas.base import SCHEMA_VERSION  # noqa: E402
from schemas.simulation import EpisodeConfig  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "fixtures" / "recordings"


def _services(**overrides):
    return default_services(AgentConfig(**overrides))


def short_cycle(store) -> tuple[str, str]:
    out = run_state_machine("AAPL", "2012-06-01", store=store, services=_services())
    return out.session_id, f"one offline cycle of AAPL as of 2012-06-01: {out.status}"


def approved_cycle(store) -> tuple[str, str]:
    paused = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=_services(), approve=True)
    out = approve_cycle(paused.session_id, store=store, approved=True, by="fixture", services=_services())
    return out.session_id, f"AAPL,MSFT as of 2012-06-01 with --approve, then approved: {paused.status} -> {out.status}"


def backtest(store) -> tuple[str, str]:
    config = EpisodeConfig(
        episode_id=f"fx-{uuid.uuid4().hex[:6]}",
        tickers=["AAPL"],
        initial_cash=100_000.0,
        start="2011-01-03",
        end="2011-01-13",
        every=4,
        bars_in_case=5,
    )
    # loose limits, so the offline agent's sizing passes VALIDATING and the recording holds fills
    services = _services(risk=RiskLimits(max_notional_pct=60.0, exposure_cap_pct=100.0))
    with tempfile.TemporaryDirectory() as out_dir:
        res = run_backtest(config, store, progress=False, services=services, out_dir=out_dir)
    return session_id_of(config.episode_id), (
        f"a backtest of AAPL, 2011-01-03..2011-01-13 every 4 sessions: {res.decision_points} decision points"
    )


SESSIONS = {"short_cycle": short_cycle, "approved_cycle": approved_cycle, "backtest_3_points": backtest}


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(out_dir: Path, tag: str, commit: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in SESSIONS.items():
        store = connect(f"mongomock://fx_{uuid.uuid4().hex[:10]}")
        session_id, what = make(store)
        events = store.events.read(session_id)
        header = {
            "fixture": name,
            "what": what,
            "session_id": session_id,
            "events": len(events),
            "schema_version": SCHEMA_VERSION,
            "made_by": "scripts/record_fixtures.py",
            "commit": commit,
            "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        path = out_dir / f"{tag}_{name}.jsonl.gz"
        # mtime=0: the same events give the same bytes
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            for line in [header, *events]:
                f.write(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n")
        written.append(path)
        print(
            f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {len(events)} events, "
            f"{path.stat().st_size // 1024} KiB; {what}"
        )
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="folder to write into (default: %(default)s)")
    ap.add_argument("--tag", default=f"v{SCHEMA_VERSION}", help="file name prefix: the format recorded")
    ap.add_argument("--commit", default=None, help="the commit the code recording is from (default: this checkout's)")
    args = ap.parse_args()
    record(Path(args.out), args.tag, args.commit or _commit())
    return 0


if __name__ == "__main__":
    sys.exit(main())
