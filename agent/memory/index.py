"""Hybrid retrieval: BM25 (bm25s) and a dense ranking, fused with Reciprocal Rank Fusion (k = 60).

Filters first (symbol, known strictly before the cycle's date, session), then a relevance floor (a record
must share a word with the query), then each side ranks the survivors; ties break by memory id. The order
records were added in changes nothing: each corpus is kept sorted.

Point in time covers the ranking too, not only the hits. BM25's statistics (document count, document
frequencies, average length) are those of the records the filters let through, never of the whole store:
otherwise a lesson learned after the cycle's date, though never returned, would shift the idf and reorder
what is returned (a rerun of a backtest would recall differently once the first run had written its
lessons). So a search scores with a bm25s index over exactly its visible records: a "view". A partition
(one symbol's records, since every agent's recall filters on one) is sorted by (known_at, memory_id), so the
records known before a date are a prefix (those of a window of recent days, a StockBench run's, a slice of it),
and a view is keyed by (the slice's bounds, session): every agent of a cycle, and every later cycle until a new
memory is known (or, in a window, one leaves it), shares it. bm25s has no incremental add, so an add
drops its symbol's partition and views; they are rebuilt on the next search.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Optional

import bm25s
import numpy as np
from bm25s.tokenization import Tokenized
from langchain_core.embeddings import Embeddings

from agent.memory.embeddings import HashedEmbeddings
from agent.memory.tokens import tokenize
from schemas.memory import MemoryRecord, RetrievalHit

RRF_K = 60
_ALL = "\x00all"  # the partition a search with no symbol reads
_VIEWS_PER_PARTITION = 8  # a cycle asks for one date (two with a session filter); older dates are not asked again


class _Partition:
    """One symbol's records sorted by (known_at, id): their filters as arrays, an inverted index of word ids
    (the relevance floor), their rows of doc vectors, and the BM25 views built so far."""

    def __init__(
        self,
        records: list[MemoryRecord],
        token_ids: dict[str, list[int]],
        rows: dict[str, int],
        matrix: np.ndarray,
        vocab: dict[str, int],
    ) -> None:
        recs = sorted(records, key=lambda r: (r.known_at, r.memory_id))
        self.records = recs
        self.known = np.array([r.known_at for r in recs], dtype="U10")
        self.session = np.array([r.session_id for r in recs], dtype=object)
        ids = [r.memory_id for r in recs]
        self.id_rank = np.empty(len(ids), dtype=np.int64)  # the tie-break: a record's place in memory-id order
        self.id_rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
        self.matrix = matrix[[rows[i] for i in ids]] if ids else np.zeros((0, matrix.shape[1]), np.float32)
        self.token_ids = [token_ids[i] for i in ids]
        self.vocab = vocab
        # postings: for each word id, the positions of the records holding it, sorted, each record once
        # (one np.unique over word * n + position rather than one per record)
        n, lengths = len(ids), [len(t) for t in self.token_ids]
        flat = np.concatenate([np.asarray(t, dtype=np.int64) for t in self.token_ids]) if n else np.zeros(0, np.int64)
        pairs = np.unique(flat * max(n, 1) + np.repeat(np.arange(n, dtype=np.int64), lengths))
        self.n_words = len(vocab)  # the vocabulary grows with other symbols' adds: ids past this are in none here
        self.post_pos = pairs % max(n, 1)
        self.post_ptr = np.searchsorted(pairs // max(n, 1), np.arange(self.n_words + 1))
        self.views: OrderedDict[tuple, bm25s.BM25] = OrderedDict()
        self._visible: dict[tuple, np.ndarray] = {}

    def visible(
        self, before: Optional[str], session_id: Optional[str], since: Optional[str] = None
    ) -> tuple[tuple, np.ndarray]:
        # 'left': a record known on the date itself is not known before it; one known on `since` is in the window
        cut = len(self.records) if before is None else int(np.searchsorted(self.known, before, side="left"))
        lo = 0 if since is None else min(cut, int(np.searchsorted(self.known, since, side="left")))
        key = (lo, cut, session_id)
        positions = self._visible.get(key)  # every agent of a cycle asks for the same (read-only, never changed)
        if positions is None:
            positions = np.arange(lo, cut)
            if session_id is not None:
                positions = positions[self.session[lo:cut] == session_id]
            positions.flags.writeable = False
            if len(self._visible) >= _VIEWS_PER_PARTITION:
                self._visible.clear()
            self._visible[key] = positions
        return key, positions

    def floor(self, words: list[int], positions: np.ndarray) -> np.ndarray:
        """The visible records that hold at least one of the query's words, read from the postings."""
        held = np.zeros(len(self.records), dtype=bool)
        for w in words:
            held[self.post_pos[self.post_ptr[w] : self.post_ptr[w + 1]]] = True
        return positions[held[positions]]

    def view(self, key: tuple, positions: np.ndarray) -> bm25s.BM25:
        if key in self.views:
            self.views.move_to_end(key)
            return self.views[key]
        bm25 = bm25s.BM25()
        # our own word ids over our own vocabulary: tokenization stays ours, and no string is re-mapped (a copy
        # of the vocabulary, which later adds to other symbols keep growing)
        bm25.index(Tokenized(ids=[self.token_ids[p] for p in positions], vocab=dict(self.vocab)), show_progress=False)
        self.views[key] = bm25
        if len(self.views) > _VIEWS_PER_PARTITION:
            self.views.popitem(last=False)
        return bm25


_QUERIES_KEPT = 4096  # query vectors kept (a backtest asks ~9 agents x a few setups: a few hundred distinct)


class HybridIndex:
    def __init__(self, embeddings: Optional[Embeddings] = None, k_rrf: int = RRF_K) -> None:
        self.embeddings = embeddings or HashedEmbeddings()
        self.k_rrf = k_rrf
        # HashedEmbeddings is a pure function of the text, and the same queries come back every cycle (an agent's
        # words plus a setup's): each one's unit vector is computed once. Another embedder is asked every time.
        self._queries: Optional[dict[str, np.ndarray]] = {} if type(self.embeddings) is HashedEmbeddings else None
        self._query_tokens: dict[str, list[str]] = {}  # a query's distinct words, in order (a pure function)
        self.reset([])

    def _query_vector(self, query: str) -> np.ndarray:
        cached = self._queries.get(query) if self._queries is not None else None
        if cached is not None:
            return cached
        q = _unit(np.asarray(self.embeddings.embed_query(query), dtype=np.float32)[None, :])[0]
        if self._queries is not None:
            if len(self._queries) >= _QUERIES_KEPT:
                self._queries.clear()
            self._queries[query] = q
        return q

    def __len__(self) -> int:
        return len(self._records)

    def reset(self, records: Iterable[MemoryRecord]) -> None:
        self._records: dict[str, MemoryRecord] = {}
        self._token_ids: dict[str, list[int]] = {}
        self._vocab: dict[str, int] = {}  # grows only: a word keeps its id for the index's life
        self._rows: dict[str, int] = {}  # memory id -> its row of self._matrix (rows are appended, never moved)
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._n_rows = 0
        self._by_symbol: dict[str, set[str]] = {}
        self._parts: dict[str, _Partition] = {}
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
        self._append_rows(_unit(np.asarray(self.embeddings.embed_documents([r.text for r in new]), dtype=np.float32)))
        for j, r in enumerate(new):
            self._records[r.memory_id] = r
            self._token_ids[r.memory_id] = [self._vocab.setdefault(w, len(self._vocab)) for w in tokenize(r.text)]
            self._rows[r.memory_id] = self._n_rows - len(new) + j
            self._by_symbol.setdefault(r.symbol or "", set()).add(r.memory_id)
            self._parts.pop(r.symbol or "", None)
        self._parts.pop(_ALL, None)

    def _append_rows(self, vectors: np.ndarray) -> None:
        need = self._n_rows + len(vectors)
        if self._matrix.shape[1] != vectors.shape[1] and self._n_rows == 0:
            self._matrix = np.zeros((0, vectors.shape[1]), dtype=np.float32)
        if need > len(self._matrix):  # capacity grows by half: appending n rows costs O(n) amortised
            grown = np.empty((max(need, len(self._matrix) * 3 // 2, 64), vectors.shape[1]), dtype=np.float32)
            grown[: self._n_rows] = self._matrix[: self._n_rows]
            self._matrix = grown
        self._matrix[self._n_rows : need] = vectors
        self._n_rows = need

    def remove(self, ids: Iterable[str]) -> int:
        n = 0
        for i in ids:
            r = self._records.pop(i, None)
            if r is not None:
                del self._token_ids[i], self._rows[i]  # its row stays in the matrix, unreferenced
                self._by_symbol[r.symbol or ""].discard(i)
                self._parts.pop(r.symbol or "", None)
                self._parts.pop(_ALL, None)
                n += 1
        return n

    def _partition(self, symbol: Optional[str]) -> _Partition:
        key = _ALL if symbol is None else symbol
        part = self._parts.get(key)
        if part is None:
            ids = self._records if symbol is None else self._by_symbol.get(symbol, ())
            part = self._parts[key] = _Partition(
                [self._records[i] for i in ids], self._token_ids, self._rows, self._matrix, self._vocab
            )
        return part

    def _query_words(self, query: str) -> list[str]:
        words = self._query_tokens.get(query)
        if words is None:
            if len(self._query_tokens) >= _QUERIES_KEPT:
                self._query_tokens.clear()
            words = self._query_tokens[query] = list(dict.fromkeys(tokenize(query)))
        return words

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
        """The k best of the symbol's records known before `before` (and on or after `since`, when given: a window of
        recent notes), in `session_id`'s when given."""
        words = [self._vocab[w] for w in self._query_words(query) if w in self._vocab]
        if not words or k <= 0:
            return []
        part = self._partition(symbol)
        words = [w for w in words if w < part.n_words]
        key, visible = part.visible(before, session_id, since)
        cand = part.floor(words, visible)
        if not len(cand):
            return []
        bm25 = part.view(key, visible)
        scores = bm25.get_scores_from_ids(words)[np.searchsorted(visible, cand)]
        bm25_rank = _ranks(scores, part.id_rank[cand])
        q = self._query_vector(query)
        # einsum, not BLAS: a multithreaded OpenBLAS matvec is 5-10x slower on a busy 2-core machine; over a
        # slice (a view, no copy) up to the last candidate, which is nearly all of them
        dense = np.einsum("ij,j->i", part.matrix[: cand[-1] + 1], q)[cand]
        dense_rank = _ranks(dense, part.id_rank[cand])
        fused = np.round(1 / (self.k_rrf + bm25_rank) + 1 / (self.k_rrf + dense_rank), 8)
        hits = []
        for j in np.lexsort((part.id_rank[cand], -fused))[:k]:
            r = part.records[cand[j]]
            hits.append(
                RetrievalHit(
                    memory_id=r.memory_id,
                    bm25_rank=int(bm25_rank[j]),
                    dense_rank=int(dense_rank[j]),
                    score=float(fused[j]),
                    known_at=r.known_at,
                    kind=r.kind,
                    symbol=r.symbol,
                    outcome=r.outcome,
                    signal=r.signal,
                    direction=r.direction,
                    text=r.text,
                )
            )
        return hits


def _unit(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 so a dot product is the cosine whatever model made them (a zero row stays 0)."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def _ranks(values: np.ndarray, id_rank: np.ndarray) -> np.ndarray:
    """1-based ranks by value, highest first; equal values ranked by memory id."""
    order = np.lexsort((id_rank, -values.astype(np.float64)))
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.arange(1, len(values) + 1)
    return ranks
