"""The local spool: audit events that could not reach the store, kept on disk until they can.

One append-only JSON-lines file per writer under `$TRADEGRAPH_HOME/spool/`. Its first line names the
store it was meant for, so a spool is only ever redelivered to that store. Every write is flushed and
fsynced before it returns. The writing process holds an exclusive `flock` on its file, so recovery
(next start, or `tradegraph store recover`) never takes a file that is still being written.
Redelivery appends through `EventStore.append`, idempotent by event_id: running it twice, or after a
partial redelivery, stores nothing twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from database.events import EventStore

HEADER_KIND = "tradegraph-spool"
REDELIVER_BATCH = 500


class SpoolFile:
    """An open spool file, locked for as long as this process writes to it."""

    def __init__(self, directory: Path, target: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.count = 0
        self._write([{"spool": HEADER_KIND, "target": target, "created": time.time(), "pid": os.getpid()}])

    def write(self, events: Iterable[dict[str, Any]]) -> None:
        events = list(events)
        self._write(events)
        self.count += len(events)

    def _write(self, lines: list[dict[str, Any]]) -> None:
        self._fh.write("".join(json.dumps(e, default=str, separators=(",", ":")) + "\n" for e in lines))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()


@dataclass
class RecoveryReport:
    files: list[str] = field(default_factory=list)
    redelivered: int = 0  # events newly stored
    already_stored: int = 0  # events the store already had (an earlier, partial redelivery)
    skipped: list[str] = field(default_factory=list)  # files in use, or meant for another store

    def line(self) -> str:
        text = (
            f"redelivered {self.redelivered} event(s) from {len(self.files)} spool file(s)"
            f" ({self.already_stored} already stored)"
        )
        return text + (f"; skipped {len(self.skipped)}: {', '.join(self.skipped)}" if self.skipped else "")


def pending_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl")) if directory.is_dir() else []


def recover(events: EventStore, directory: Path, target: str) -> RecoveryReport:
    """Redeliver every spool file meant for `target` that no live writer holds, then remove it."""
    report = RecoveryReport()
    for path in pending_files(directory):
        with open(path, "r+", encoding="utf-8") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                report.skipped.append(f"{path.name} (being written)")
                continue
            header, spooled = _read(fh)
            if header.get("target") != target:
                report.skipped.append(f"{path.name} (for {header.get('target') or 'an unknown store'})")
                continue
            for i in range(0, len(spooled), REDELIVER_BATCH):
                batch = spooled[i : i + REDELIVER_BATCH]
                stored = len(events.append(batch))
                report.redelivered += stored
                report.already_stored += len(batch) - stored
            path.unlink()
            report.files.append(path.name)
    return report


def _read(fh) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = fh.read().splitlines()
    rows = []
    for n, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except ValueError:
            if n == len(lines) - 1:  # a write torn by a crash: it was never acknowledged to anyone
                break
            raise
    header = rows[0] if rows and rows[0].get("spool") == HEADER_KIND else {}
    return header, rows[1:] if header else rows
