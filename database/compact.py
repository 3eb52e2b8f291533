"""`tradegraph store compact`: give back to the disk the space deleted sessions leave behind.

Deleting documents frees pages inside the store's files but never shrinks them (`sessions prune` of 263,665 events
left a 356 MB file). Each backend compacts its own way:
- the embedded store (nx-27017, one SQLite file per database, WAL mode): the server's `vacuum` command rewrites the
  file without its free pages (into the WAL), its `wal_checkpoint` moves that into the file, which then shrinks,
  and a TRUNCATE checkpoint on the file itself empties the WAL (the wire command takes no mode). SQLite's locks make
  this safe beside the running server; a checkpoint another reader holds back is retried once and said so;
- MongoDB: `compact` on each collection (WiredTiger releases the free space to the OS where it can);
- mongomock: in memory, nothing to give back.
Bytes before and after are the files' sizes (the database file, its -wal and -shm) or MongoDB's storage size.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

SQLITE_SIDECARS = ("", "-wal", "-shm")


@dataclass(frozen=True)
class Compacted:
    where: str
    how: str
    before: int
    after: int
    note: Optional[str] = None

    @property
    def reclaimed(self) -> int:
        return max(0, self.before - self.after)

    def line(self) -> str:
        text = (
            f"compacted {self.where} ({self.how}): {self.before:,} bytes before, {self.after:,} after, "
            f"{self.reclaimed:,} reclaimed"
        )
        return text + (f"; {self.note}" if self.note else "")


def compact(store: Any) -> Compacted:
    if store.uri.startswith("mongomock://"):
        return Compacted(store.uri, "in memory", 0, 0, "a mongomock store keeps nothing on disk")
    path = _sqlite_file(store.db.command("dbStats"))
    return _compact_sqlite(store.db, path) if path is not None else _compact_mongodb(store.db)


def _sqlite_file(stats: dict[str, Any]) -> Optional[Path]:
    """nx-27017 answers dbStats with its SQLite file as `db` (MongoDB with the database's name)."""
    db = stats.get("db")
    if isinstance(db, str) and db.endswith(".db") and Path(db).is_file():
        return Path(db)
    return None


def file_bytes(path: Path) -> int:
    """The SQLite database's bytes on disk: the file and its WAL and shared-memory files."""
    total = 0
    for suffix in SQLITE_SIDECARS:
        try:
            total += Path(f"{path}{suffix}").stat().st_size
        except FileNotFoundError:
            pass
    return total


def _ok(answer: dict[str, Any], what: str) -> None:
    if not answer.get("ok"):
        raise RuntimeError(f"{what} refused by the store: {answer.get('errmsg') or answer}")


def _compact_sqlite(db: Any, path: Path) -> Compacted:
    before = file_bytes(path)
    _ok(db.command("vacuum"), "vacuum")
    _ok(db.command("wal_checkpoint"), "wal_checkpoint")
    note = None
    if not _truncate_wal(path):
        time.sleep(0.5)
        if not _truncate_wal(path):
            note = "the write-ahead log was in use and keeps its size until the server's next checkpoint"
    return Compacted(str(path), "SQLite VACUUM", before, file_bytes(path), note)


def _truncate_wal(path: Path) -> bool:
    """A TRUNCATE checkpoint from a connection of our own: False when a reader held it back (busy)."""
    conn = sqlite3.connect(str(path), timeout=5.0)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0
    finally:
        conn.close()


def _compact_mongodb(db: Any) -> Compacted:
    def size() -> int:
        stats = db.command("dbStats")
        return int(stats.get("storageSize", 0)) + int(stats.get("indexSize", 0))

    before = size()
    for name in db.list_collection_names():
        db.command("compact", name)
    return Compacted(db.name, "MongoDB compact", before, size())
