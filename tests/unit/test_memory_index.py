"""HybridIndex: the filters, the relevance floor, BM25 and dense ranks fused by RRF (k = 60), point in time in
the ranking too, determinism; the tokenizer and the hashed vector it rests on."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import bm25s
import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from agent.memory import HashedEmbeddings, HybridIndex, tokenize
from schemas.memory import MemoryRecord


def rec(mid, text, symbol="AAPL", known="2012-01-02", session="s1", **kw):
    return MemoryRecord(
        memory_id=mid, kind="review", symbol=symbol, known_at=known, session_id=session, text=text, **kw
    )


CORPUS = [
    rec("a", "stop hit in uptrend rsi_overbought lesson wait"),
    rec("b", "target reached in uptrend"),
    rec("c", "horizon exit flat market"),
    rec("d", "stop stop stop downtrend"),
    rec("e", "uptrend rsi_overbought stop", symbol="MSFT"),
]


class Table(Embeddings):
    """A stand-in model whose vectors are chosen by hand: the dense ranking is known before searching."""

    def __init__(self, table):
        self.table = table

    def embed_documents(self, texts):
        return [self.table[t] for t in texts]

    def embed_query(self, text):
        return [1.0, 0.0]


def test_rrf_arithmetic_on_ranks_worked_out_by_hand():
    docs = [
        rec("x", "stop stop"),
        rec("y", "stop loss target"),
        rec("z", "stop loss target win uptrend"),
        rec("w", "horizon flat"),
    ]
    # BM25 for the one-word query "stop" (same idf for all three): x has two hits in two words, y one in three,
    # z one in five, so x > y > z. Dense, by hand: cosine with (1, 0) is 1 for y, 0.6 for z, 0.1 for x.
    model = Table(
        {
            "stop stop": [0.1, 0.995],
            "stop loss target": [2.0, 0.0],
            "stop loss target win uptrend": [0.6, 0.8],
            "horizon flat": [1.0, 0.0],
        }
    )
    index = HybridIndex(embeddings=model)
    index.add(docs)
    hits = index.search("stop", symbol="AAPL", before=None, k=10)
    got = {h.memory_id: (h.bm25_rank, h.dense_rank, h.score) for h in hits}
    assert got == {
        "x": (1, 3, round(1 / 61 + 1 / 63, 8)),
        "y": (2, 1, round(1 / 62 + 1 / 61, 8)),
        "z": (3, 2, round(1 / 63 + 1 / 62, 8)),
    }
    # w shares no word with the query: the best dense vector of all, yet the floor keeps it out
    assert [h.memory_id for h in hits] == ["y", "x", "z"]
    assert HybridIndex(embeddings=model).search("stop", symbol="AAPL", before=None) == []  # empty index
    small = HybridIndex(embeddings=model, k_rrf=1)
    small.add(docs)
    assert {h.memory_id: h.score for h in small.search("stop", symbol="AAPL", before=None, k=10)} == {
        "x": round(1 / 2 + 1 / 4, 8),
        "y": round(1 / 3 + 1 / 2, 8),
        "z": round(1 / 4 + 1 / 3, 8),
    }


def test_bm25_ranks_are_bm25s_own_order_over_the_visible_records():
    index = HybridIndex()
    index.add(CORPUS)
    hits = index.search("stop uptrend", symbol="AAPL", before="2012-02-01", k=10)
    assert {h.memory_id for h in hits} == {"a", "b", "d"}
    aapl = [r for r in CORPUS if r.symbol == "AAPL"]
    ref = bm25s.BM25()
    ref.index([tokenize(r.text) for r in aapl], show_progress=False)
    scores = dict(zip((r.memory_id for r in aapl), ref.get_scores(["stop", "uptrend"])))
    expected = sorted((m for m in scores if scores[m] > 0), key=lambda m: (-scores[m], m))
    assert [h.memory_id for h in sorted(hits, key=lambda h: h.bm25_rank)] == expected
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_the_floor_holds_however_small_the_corpus():
    index = HybridIndex()
    index.add([rec("only", "horizon exit flat market")])
    assert index.search("stop uptrend", symbol="AAPL", before=None, k=10) == []
    # a stopword shared is no word shared
    assert index.search("the stop", symbol="AAPL", before=None) == []
    index.add([rec("two", "the stop")])
    assert [h.memory_id for h in index.search("the stop", symbol="AAPL", before=None, k=10)] == ["two"]
    assert index.search("", symbol="AAPL", before=None) == [] and index.search("the of", symbol=None, before=None) == []


def test_symbol_point_in_time_session_and_k():
    index = HybridIndex()
    index.add(CORPUS + [rec("f", "stop uptrend", known="2012-03-01"), rec("g", "stop uptrend", session="s2")])
    assert {h.memory_id for h in index.search("stop", symbol="MSFT", before=None, k=10)} == {"e"}
    assert {h.memory_id for h in index.search("stop", symbol=None, before=None, k=10)} == {"a", "d", "e", "f", "g"}
    # known exactly at the date is not known before it
    assert "f" not in {h.memory_id for h in index.search("stop", symbol="AAPL", before="2012-03-01", k=10)}
    assert "f" in {h.memory_id for h in index.search("stop", symbol="AAPL", before="2012-03-02", k=10)}
    assert index.search("stop", symbol="AAPL", before="2012-01-02") == []
    assert {h.memory_id for h in index.search("stop", symbol="AAPL", before=None, session_id="s2", k=10)} == {"g"}
    assert len(index.search("stop uptrend", symbol="AAPL", before=None, k=2)) == 2
    assert len(index.search("stop uptrend", symbol="AAPL", before=None, k=10)) == 5
    assert index.search("stop", symbol="IBM", before=None) == []


def _noisy(rng, n, known, prefix, words=None):
    vocab = "stop target uptrend downtrend rsi_overbought rsi_oversold loss win high_volatility wait size".split()
    return [
        rec(
            f"{prefix}{i}",
            " ".join(rng.choice(vocab) for _ in range(words or rng.randint(3, 12))),
            known=known(i),
            session=f"s{i % 3}",
        )
        for i in range(n)
    ]


def test_memories_known_later_change_no_rank_and_no_score():
    """The look-ahead perturbation at the index: records known on or after the date (long, sharing every word)
    shift idf and average length if they are counted, and so would reorder what is returned."""
    rng = random.Random(1)
    past = _noisy(rng, 40, lambda i: f"2011-01-{1 + i % 28:02d}", "p")
    later = _noisy(rng, 40, lambda i: "2011-02-01" if i % 2 else "2011-03-01", "z", words=30)
    clean, planted = HybridIndex(), HybridIndex()
    clean.add(past)
    planted.add(later + past)
    queries = ["stop uptrend", "target win rsi_overbought", "loss downtrend high_volatility", "wait size"]
    for q in queries:
        for session in (None, "s1"):
            a = clean.search(q, symbol="AAPL", before="2011-02-01", session_id=session, k=5)
            assert a and a == planted.search(q, symbol="AAPL", before="2011-02-01", session_id=session, k=5)
    # and other sessions' records change nothing of a session's recall
    other = HybridIndex()
    other.add([r for r in past if r.session_id == "s1"])
    for q in queries:
        assert other.search(q, symbol="AAPL", before=None, k=5) == clean.search(
            q, symbol="AAPL", before=None, session_id="s1", k=5
        )


def test_insertion_order_changes_nothing():
    rng = random.Random(3)
    records = _noisy(rng, 60, lambda i: f"2012-0{1 + i % 3}-1{i % 10}", "m")
    records += [r.model_copy(update={"memory_id": "x" + r.memory_id, "symbol": "MSFT"}) for r in records[:20]]
    a, b = HybridIndex(), HybridIndex()
    a.add(records)
    shuffled = records[:]
    rng.shuffle(shuffled)
    for r in shuffled:  # one at a time, searching between: partitions and views rebuilt each time
        b.add([r])
        b.search("stop", symbol="AAPL", before="2012-02-15")
    for q in ("stop uptrend", "target loss", "rsi_overbought wait stop"):
        for symbol in ("AAPL", "MSFT", None):
            for before in (None, "2012-02-15"):
                ha = a.search(q, symbol=symbol, before=before, k=8)
                assert ha and ha == b.search(q, symbol=symbol, before=before, k=8)


def test_duplicate_id_is_an_error_and_remove_takes_it_out():
    index = HybridIndex()
    index.add(CORPUS)
    with pytest.raises(ValueError, match="'a'"):
        index.add([rec("a", "again")])
    with pytest.raises(ValueError, match="'new'"):
        index.add([rec("new", "stop"), rec("new", "stop")])
    assert len(index) == 5  # a rejected batch adds nothing
    assert index.remove(["a", "zzz"]) == 1
    assert "a" not in {h.memory_id for h in index.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    assert len(index) == 4
    index.add([rec("a", "stop uptrend again")])  # a removed id may come back
    assert "a" in {h.memory_id for h in index.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    index.reset(CORPUS[:2])
    assert len(index) == 2


def test_an_embeddings_object_replaces_the_hashed_vector():
    texts = {r.text: [0.0, 1.0] for r in CORPUS}
    texts["target reached in uptrend"] = [1.0, 0.0]  # the custom model puts b first; the hashed one puts it last
    hashed, custom = HybridIndex(), HybridIndex(embeddings=Table(texts))
    hashed.add(CORPUS)
    custom.add(CORPUS)
    a = {h.memory_id: h for h in hashed.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    b = {h.memory_id: h for h in custom.search("stop uptrend", symbol="AAPL", before=None, k=10)}
    assert {m: h.bm25_rank for m, h in a.items()} == {m: h.bm25_rank for m, h in b.items()}
    assert {m: h.dense_rank for m, h in a.items()} == {"d": 1, "a": 2, "b": 3}
    assert {m: h.dense_rank for m, h in b.items()} == {"b": 1, "a": 2, "d": 3}  # a and d tie: by id


def test_tokens_and_the_hashed_vector_are_deterministic():
    assert tokenize("AAPL: the RSI_overbought, above SMA50; stop-hit!") == [
        "aapl",
        "rsi_overbought",
        "above",
        "sma50",
        "stop",
        "hit",
    ]
    emb = HashedEmbeddings(dim=64)
    v = np.array(emb.embed_query("uptrend rsi_overbought stop hit"))
    assert v.shape == (64,) and np.linalg.norm(v) == pytest.approx(1.0)
    assert emb.embed_documents(["the of"]) == [[0.0] * 64]
    # blake2b, not Python's salted hash(): another process with another hash seed gets the same vector
    code = "from agent.memory import HashedEmbeddings; print(HashedEmbeddings(64).embed_query('uptrend rsi_overbought stop hit'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=os.getcwd(),
    ).stdout
    assert np.allclose(eval(out), v)
