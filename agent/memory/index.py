"""Hybrid retrieval: BM25 (bm25s) and a dense ranking, fused with Reciprocal Rank Fusion (k = 60).

Filters first (symbol, known strictly before the cycle's date, session), then a relevance floor (a record
must share a word with the query), then each side ranks the survivors; ties break by memory id. The order
records were added in changes nothing: each corpus is kept sorted by id.

The index is partitioned by symbol, because every agent's recall filters on one: a search reads only that
symbol's records, and adding a memory re-indexes only its symbol's partition (bm25s has no incremental add).
BM25's statistics (idf, average length) are therefore those of the symbol's own memories. A search with no
symbol uses one partition over everything, built when first asked for.
"""
from __future__ import annotations

from typing import Iterable, Optional

import bm25s
import numpy as np
from langchain_core.embeddings import Embeddings

from agent.memory.embeddings import HashedEmbeddings
from agent.memory.tokens import tokenize
from schemas.memory import MemoryRecord, RetrievalHit

RRF_K = 60
_ALL = "\x00all"


class _Partition:
    """One searchable corpus: its records sorted by id, their filters as arrays, BM25 and the doc vectors."""

    def __init__(self, ids: list[str], records: dict[str, MemoryRecord], tokens: dict[str, list[str]],
                 vectors: dict[str, np.ndarray]) -> None:
        self.ids = sorted(ids)
        recs = [records[i] for i in self.ids]
        self.records = recs
        self.symbol = np.array([r.symbol or "" for r in recs], dtype=object)
        self.known = np.array([r.known_at for r in recs], dtype="U10")
        self.session = np.array([r.session_id for r in recs], dtype=object)
        self.matrix = np.vstack([vectors[i] for i in self.ids]) if self.ids else None
        self.bm25 = bm25s.BM25()
        if self.ids:
            # our own tokens (a document with none still needs one entry for bm25s)
            self.bm25.index([tokens[i] or ["_empty_"] for i in self.ids], show_progress=False)


class HybridIndex:
    def __init__(self, embeddings: Optional[Embeddings] = None, k_rrf: int = RRF_K) -> None:
        self.embeddings = embeddings or HashedEmbeddings()
        self.k_rrf = k_rrf
        self._records: dict[str, MemoryRecord] = {}
        self._tokens: dict[str, list[str]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._by_symbol: dict[str, set[str]] = {}
        self._parts: dict[str, _Partition] = {}  # built partitions; a change drops the affected ones

    def __len__(self) -> int:
        return len(self._records)

    def reset(self, records: Iterable[MemoryRecord]) -> None:
        self._records, self._tokens, self._vectors, self._by_symbol, self._parts = {}, {}, {}, {}, {}
        self.add(records)

    def add(self, records: Iterable[MemoryRecord]) -> None:
        new = list(records)
        seen: set[str] = set()
        for r in new:
            if r.memory_id in self._records or r.memory_id in seen:
                raise ValueError(f"memory '{r.memory_id}' is already in the index")
            seen.add(r.memory_id)
        if not new:
            return
        vectors = self.embeddings.embed_documents([r.text for r in new])
        for r, v in zip(new, vectors):
            self._records[r.memory_id] = r
            self._tokens[r.memory_id] = tokenize(r.text)
            self._vectors[r.memory_id] = np.asarray(v, dtype=np.float32)
            self._by_symbol.setdefault(r.symbol or "", set()).add(r.memory_id)
            self._parts.pop(r.symbol or "", None)
        self._parts.pop(_ALL, None)

    def remove(self, ids: Iterable[str]) -> int:
        n = 0
        for i in ids:
            r = self._records.pop(i, None)
            if r is not None:
                self._tokens.pop(i)
                self._vectors.pop(i)
                self._by_symbol[r.symbol or ""].discard(i)
                self._parts.pop(r.symbol or "", None)
                self._parts.pop(_ALL, None)
                n += 1
        return n

    def _partition(self, symbol: Optional[str]) -> _Partition:
        key = _ALL if symbol is None else symbol
        part = self._parts.get(key)
        if part is None:
            ids = list(self._records) if symbol is None else list(self._by_symbol.get(symbol, ()))
            part = self._parts[key] = _Partition(ids, self._records, self._tokens, self._vectors)
        return part

    def search(self, query: str, *, symbol: Optional[str], before: Optional[str], session_id: Optional[str] = None,
               k: int = 5) -> list[RetrievalHit]:
        part = self._partition(symbol)
        if not part.ids:
            return []
        words = [w for w in dict.fromkeys(tokenize(query)) if w in part.bm25.vocab_dict]
        if not words:
            return []
        mask = np.ones(len(part.ids), dtype=bool)
        if before is not None:
            mask &= part.known < before  # point in time: known strictly before the cycle's date
        if session_id is not None:
            mask &= part.session == session_id
        scores = part.bm25.get_scores(words)
        # the floor: bm25s's Lucene idf, log(1 + (N - df + 0.5) / (df + 0.5)), is above 0 for every term, so a
        # positive score means at least one shared query word, and a record sharing none scores exactly 0
        cand = np.flatnonzero(mask & (scores > 0))
        if not len(cand):
            return []
        # a partition is sorted by memory id, so a record's position breaks ties by id
        bm25_rank = _ranks(scores[cand], cand)
        dense = part.matrix[cand] @ np.asarray(self.embeddings.embed_query(query), dtype=np.float32)
        dense_rank = _ranks(dense, cand)
        fused = np.round(1 / (self.k_rrf + bm25_rank) + 1 / (self.k_rrf + dense_rank), 8)
        hits = []
        for j in np.lexsort((cand, -fused))[:k]:
            r = part.records[cand[j]]
            hits.append(RetrievalHit(memory_id=r.memory_id, bm25_rank=int(bm25_rank[j]), dense_rank=int(dense_rank[j]),
                                     score=float(fused[j]), known_at=r.known_at, kind=r.kind, symbol=r.symbol,
                                     outcome=r.outcome, signal=r.signal, direction=r.direction, text=r.text))
        return hits


def _ranks(values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """1-based ranks by value, highest first; equal values ranked by position (memory id order)."""
    order = np.lexsort((positions, -values.astype(np.float64)))
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.arange(1, len(values) + 1)
    return ranks
