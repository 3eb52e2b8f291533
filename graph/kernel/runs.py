"""Where runs live: the folder backtests, sweeps and benchmarks keep their files in (each under its id), the same
from every working directory, so `audit lookahead sb-…` or `backtest --run-id …` finds an id wherever it is run.

$TRADEGRAPH_RUNS_DIR when set, else `experiments/` in the store's home (database/embedded.py resolve_home:
$TRADEGRAPH_HOME, a project's .tradegraph, or the per-user folder). `--out DIR` on a command still names another.
Before, the default was ./experiments of the working directory: a command that would use an id found only there
says so in a note (pass `--out experiments`, or move the folder into the runs folder); nothing is moved for you.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

RUNS_ENV = "TRADEGRAPH_RUNS_DIR"
LEGACY = "experiments"  # the old default, relative to the working directory


def runs_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    env = os.environ if env is None else env
    raw = env.get(RUNS_ENV)
    if raw is not None and raw.strip():
        return Path(raw).expanduser().resolve()
    from database.embedded import resolve_home

    return resolve_home(env).path / "experiments"


def check_runs_dir_env(env: Mapping[str, str]) -> None:
    """TRADEGRAPH_RUNS_DIR at start-up: set but empty, or an existing file, is refused (ValueError, one line)."""
    raw = env.get(RUNS_ENV)
    if raw is None:
        return
    if not raw.strip():
        raise ValueError(f"{RUNS_ENV}={raw!r} is empty: name a folder, or unset it for <home>/experiments")
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{RUNS_ENV}={raw!r} is not a directory")


def legacy_note(folder: str | Path, run_id: Optional[str]) -> Optional[str]:
    """A note when `run_id` exists under ./experiments (the old default) but not in `folder`, which this command
    uses: the id would otherwise look lost, or a resumed run start afresh elsewhere."""
    if not run_id:
        return None
    old = Path.cwd() / LEGACY
    try:
        if old.resolve() == Path(folder).resolve() or (Path(folder) / run_id).exists():
            return None
        if (old / run_id).is_dir():
            return (
                f"note: {old / run_id} exists (runs were kept in ./{LEGACY} before); this command uses "
                f"{Path(folder) / run_id}: pass --out {LEGACY} to use the old one"
            )
    except OSError:
        return None
    return None
