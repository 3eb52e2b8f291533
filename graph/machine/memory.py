"""The memory bank of a process: the `memories` collection and a hybrid index kept in step with it, and the
per-cycle recall that agents query (agent/memory/recall.py) under the cycle's memory mode."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import date, timedelta
from typing import Optional

from langchain_core.embeddings import Embeddings

from agent.memory.index import HybridIndex
from database.memories import MemoryStore
from schemas.memory import MemoryRecord, RetrievalHit


class MemoryBank:
    """One index per process. Another process's writes (or a `memory forget`) change the store's revision:
    the next cycle reloads the index from the store, so every cycle searches what the store holds."""

    def __init__(self, store: MemoryStore, embeddings: Optional[Embeddings] = None) -> None:
        self.store = store
        self.index = HybridIndex(embeddings)
        self._revision: Optional[str] = None
        self._lock = threading.Lock()

    def refresh(self) -> None:
        with self._lock:
            revision = self.store.revision()
            if revision != self._revision:
                self.index.reset(self.store.all())
                self._revision = revision

    def write(self, records: Iterable[MemoryRecord]) -> int:
        """Store each new record (an id already stored keeps its first text); returns how many were new."""
        with self._lock:
            added = [r for r in records if self.store.add(r)]
            if self._revision is not None:  # an index never loaded will load these with the rest
                self.index.add(added)
                self._revision = self.store.revision()
            return len(added)

    def search(
        self,
        query: str,
        *,
        symbol: Optional[str],
        before: Optional[str],
        session_id: Optional[str] = None,
        k: int = 5,
        since: Optional[str] = None,
    ) -> list[RetrievalHit]:
        with self._lock:
            return self.index.search(query, symbol=symbol, before=before, session_id=session_id, k=k, since=since)


class MemoryRecall:
    """A live cycle's recall: point in time (known before the cycle's date), the symbol's notes only, in `session`
    mode only this session's, and with `days` (a StockBench run's 7: agent/input_window.py) only those known in
    the days before the cycle's date."""

    def __init__(self, bank: MemoryBank, mode: str, session_id: str, k: int, days: Optional[int] = None) -> None:
        self.bank, self.mode, self.session_id, self.k, self.days = bank, mode, session_id, k, days
        self._refreshed = False

    def search(self, *, agent: str, symbol: str, query: str, as_of: str) -> tuple[dict, list[RetrievalHit]]:
        if not self._refreshed:  # once per cycle: what other processes wrote (or forgot) since the last one
            self.bank.refresh()
            self._refreshed = True
        session = self.session_id if self.mode == "session" else None
        applied: dict = {"symbol": symbol, "known_before": as_of, "session_id": session, "k": self.k, "mode": self.mode}
        since = None
        if self.days is not None:  # said in the filter only when set: an ordinary run's retrieval reads as before
            since = (date.fromisoformat(as_of[:10]) - timedelta(days=self.days)).isoformat()
            applied["known_from"] = since
        return applied, self.bank.search(query, symbol=symbol, before=as_of, session_id=session, k=self.k, since=since)
