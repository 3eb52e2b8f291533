"""HybridIndex: the filters, the relevance floor, BM25 and dense ranks fused by RRF (k = 60), determinism."""
from __future__ import annotations

import random

import pytest
from langchain_core.embeddings import Embeddings

from agent.memory.index import HybridIndex
from schemas.memory import MemoryRecord


def rec(mid, text, symbol="AAPL", known="2012-01-02", session="s1", **kw):
    return MemoryRecord(memory_id=mid, kind="review", symbol=symbol, known_at=known, session_id=session, text=text,
                        **kw)


CORPUS = [
    rec("a", "stop hit in uptrend rsi_overbought lesson wait"),
    rec("b", "target reached in uptrend"),
    rec("c", "horizon exit flat market"),
    rec("d", "stop stop stop downtrend"),
    rec("e", "uptrend rsi_overbought stop", symbol="MSFT"),
]


def test_rrf_fuses_the_two_rankings_of_the_floored_candidates():
    index = HybridIndex()
    index.add(CORPUS)
    hits = index.search("stop uptrend", symbol="AAPL", before="2012-02-01", k=10)
    # c shares no word with the query: the floor keeps it out however small the corpus
    assert {h.memory_id for h in hits} == {"a", "b", "d"}
    for h in hits:
        assert h.score == pytest.approx(round(1 / (60 + h.bm25_rank) + 1 / (60 + h.dense_rank), 8))
    assert sorted(h.bm25_rank for h in hits) == [1, 2, 3] and sorted(h.dense_rank for h in hits) == [1, 2, 3]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    # the BM25 ranks are bm25s's own order over the symbol's memories (computed here independently)
    import bm25s

    from agent.memory.tokens import tokenize

    aapl = [r for r in CORPUS if r.symbol == "AAPL"]
    ref = bm25s.BM25()
    ref.index([tokenize(r.text) for r in aapl], show_progress=False)
    scores = ref.get_scores(["stop", "uptrend"])
    expected = sorted((m for m, sc in zip((r.memory_id for r in aapl), scores) if sc > 0),
                      key=lambda m: -scores[[r.memory_id for r in aapl].index(m)])
    assert [h.memory_id for h in sorted(hits, key=lambda h: h.bm25_rank)] == expected


def test_symbol_point_in_time_session_and_k():
    index = HybridIndex()
    index.add(CORPUS + [rec("f", "stop uptrend", known="2012-03-01"), rec("g", "stop uptrend", session="s2")])
    assert all(h.symbol == "MSFT" for h in index.search("stop", symbol="MSFT", before=None))
    # known exactly at the date is not known before it
    assert "f" not in {h.memory_id for h in index.search("stop", symbol="AAPL", before="2012-03-01", k=10)}
    assert "f" in {h.memory_id for h in index.search("stop", symbol="AAPL", before="2012-03-02", k=10)}
    assert {h.memory_id for h in index.search("stop", symbol="AAPL", before=None, session_id="s2", k=10)} == {"g"}
    assert len(index.search("stop uptrend", symbol="AAPL", before=None, k=2)) == 2
    assert index.search("nothing shared", symbol="AAPL", before=None) == []
    assert index.search("stop", symbol="IBM", before=None) == []


def test_insertion_order_changes_nothing():
    rng = random.Random(3)
    records = [rec(f"m{i}", " ".join(rng.choice(["stop", "uptrend", "target", "loss", "rsi_overbought", "flat"])
                                     for _ in range(6))) for i in range(60)]
    a, b = HybridIndex(), HybridIndex()
    a.add(records)
    shuffled = records[:]
    rng.shuffle(shuffled)
    for r in shuffled:  # one at a time: partitions rebuilt between searches
        b.add([r])
        b.search("stop", symbol="AAPL", before=None)
    for q in ("stop uptrend", "target loss", "rsi_overbought flat stop"):
        assert a.search(q, symbol="AAPL", before=None, k=8) == b.search(q, symbol="AAPL", before=None, k=8)
        assert a.search(q, symbol=None, before=None, k=8) == b.search(q, symbol=None, before=None, k=8)


def test_duplicate_id_is_an_error_and_remove_takes_it_out():
    index = HybridIndex()
    index.add(CORPUS)
    with pytest.raises(ValueError, match="'a'"):
        index.add([rec("a", "again")])
    assert index.remove(["a", "zzz"]) == 1
    assert "a" not in {h.memory_id for h in index.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    assert len(index) == 4


class Reversed(Embeddings):
    """A stand-in model: scores records by how few words they have, the opposite of what BM25 likes here."""

    def embed_documents(self, texts):
        return [[1.0 / len(t.split()), 0.0] for t in texts]

    def embed_query(self, text):
        return [1.0, 0.0]


def test_an_embeddings_object_replaces_the_hashed_vector():
    hashed, custom = HybridIndex(), HybridIndex(embeddings=Reversed())
    hashed.add(CORPUS)
    custom.add(CORPUS)
    a = {h.memory_id: h for h in hashed.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    b = {h.memory_id: h for h in custom.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    assert {m: h.bm25_rank for m, h in a.items()} == {m: h.bm25_rank for m, h in b.items()}
    # shortest text first under the custom model: b (4 words), d (4), a (7); ties by id
    assert [m for m, h in sorted(b.items(), key=lambda kv: kv[1].dense_rank)] == ["b", "d", "a"]
