"""Hybrid retrieval: BM25 (bm25s) and a dense ranking, fused with Reciprocal Rank Fusion (k = 60).

Filters first (symbol, known strictly before the cycle's date, session), then a relevance floor (a record
must share a word with the query), then each side ranks the survivors; ties break by memory id. The order
records were added in changes nothing: the corpus is kept sorted by id.
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


class HybridIndex:
    def __init__(self, embeddings: Optional[Embeddings] = None, k_rrf: int = RRF_K) -> None:
        self.embeddings = embeddings or HashedEmbeddings()
        self.k_rrf = k_rrf
        self._records: dict[str, MemoryRecord] = {}
        self._tokens: dict[str, list[str]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._dirty = True

    def __len__(self) -> int:
        return len(self._records)

    def reset(self, records: Iterable[MemoryRecord]) -> None:
        self._records, self._tokens, self._vectors = {}, {}, {}
        self.add(records)

    def add(self, records: Iterable[MemoryRecord]) -> None:
        new = list(records)
        for r in new:
            if r.memory_id in self._records:
                raise ValueError(f"memory '{r.memory_id}' is already in the index")
        if not new:
            return
        vectors = self.embeddings.embed_documents([r.text for r in new])
        for r, v in zip(new, vectors):
            self._records[r.memory_id] = r
            self._tokens[r.memory_id] = tokenize(r.text)
            self._vectors[r.memory_id] = np.asarray(v, dtype=np.float32)
        self._dirty = True  # bm25s has no incremental add: the next search re-indexes

    def remove(self, ids: Iterable[str]) -> int:
        n = 0
        for i in ids:
            if self._records.pop(i, None) is not None:
                self._tokens.pop(i)
                self._vectors.pop(i)
                n += 1
        self._dirty = self._dirty or bool(n)
        return n

    def _build(self) -> None:
        self._ids = sorted(self._records)
        recs = [self._records[i] for i in self._ids]
        self._symbol = np.array([r.symbol or "" for r in recs], dtype=object)
        self._known = np.array([r.known_at for r in recs], dtype="U10")
        self._session = np.array([r.session_id for r in recs], dtype=object)
        self._token_sets = [set(self._tokens[i]) for i in self._ids]
        self._matrix = (np.vstack([self._vectors[i] for i in self._ids]) if self._ids
                        else np.zeros((0, 1), dtype=np.float32))
        self._bm25 = bm25s.BM25()
        if self._ids:
            # our own tokens (a document with none still needs one entry for bm25s)
            self._bm25.index([self._tokens[i] or ["_empty_"] for i in self._ids], show_progress=False)
        self._dirty = False

    def search(self, query: str, *, symbol: Optional[str], before: Optional[str], session_id: Optional[str] = None,
               k: int = 5) -> list[RetrievalHit]:
        if self._dirty:
            self._build()
        words = [w for w in dict.fromkeys(tokenize(query)) if w in self._bm25.vocab_dict] if self._ids else []
        if not words:
            return []
        mask = np.ones(len(self._ids), dtype=bool)
        if symbol is not None:
            mask &= self._symbol == symbol
        if before is not None:
            mask &= self._known < before  # point in time: known strictly before the cycle's date
        if session_id is not None:
            mask &= self._session == session_id
        scores = self._bm25.get_scores(words)
        query_set = set(words)
        cand = [i for i in np.flatnonzero(mask & (scores > 0)) if self._token_sets[i] & query_set]
        if not cand:
            return []
        cand_ids = [self._ids[i] for i in cand]
        bm25_order = sorted(range(len(cand)), key=lambda j: (-float(scores[cand[j]]), cand_ids[j]))
        qv = np.asarray(self.embeddings.embed_query(query), dtype=np.float32)
        dense = self._matrix[cand] @ qv
        dense_order = sorted(range(len(cand)), key=lambda j: (-float(dense[j]), cand_ids[j]))
        bm25_rank = {j: r for r, j in enumerate(bm25_order, 1)}
        dense_rank = {j: r for r, j in enumerate(dense_order, 1)}
        fused = sorted(((round(1 / (self.k_rrf + bm25_rank[j]) + 1 / (self.k_rrf + dense_rank[j]), 8), cand_ids[j], j)
                        for j in range(len(cand))), key=lambda x: (-x[0], x[1]))
        hits = []
        for score, mid, j in fused[:k]:
            r = self._records[mid]
            hits.append(RetrievalHit(memory_id=mid, bm25_rank=bm25_rank[j], dense_rank=dense_rank[j], score=score,
                                     known_at=r.known_at, kind=r.kind, symbol=r.symbol, outcome=r.outcome,
                                     signal=r.signal, direction=r.direction, text=r.text))
        return hits
