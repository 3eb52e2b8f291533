"""The `memories` collection on every backend: a memory id is written once (racing writers too), listing is
point in time, forgetting needs a filter, and the revision tells a cached index when to reload."""

from __future__ import annotations

import threading

import pytest

from schemas.memory import MemoryRecord


def rec(mid, symbol="AAPL", known="2012-01-02", session="s1", text="stop uptrend", kind="review"):
    return MemoryRecord(memory_id=mid, kind=kind, symbol=symbol, known_at=known, session_id=session, text=text)


def test_add_once_list_and_forget(store):
    m = store.memories
    assert m.add(rec("a")) and not m.add(rec("a", text="rewritten"))
    assert m.get("a").text == "stop uptrend"  # the first stays
    m.add(rec("b", known="2012-02-01"))
    m.add(rec("c", symbol="MSFT", session="s2"))
    assert [r.memory_id for r in m.list(symbol="AAPL")] == ["a", "b"]
    assert [r.memory_id for r in m.list(before="2012-02-01")] == ["a", "c"]
    assert [r.memory_id for r in m.list(session_id="s2")] == ["c"]
    with pytest.raises(ValueError):
        m.forget()
    assert m.forget(symbol="AAPL") == 2 and m.count() == 1


def test_listing_filters_sorts_and_returns_bare_records(store):
    m = store.memories
    m.ensure_indexes()
    for r in (
        rec("z", known="2012-01-05"),
        rec("y", known="2012-01-05", kind="cycle"),
        rec("x", known="2012-01-09"),
        rec("w", known="2012-01-01", symbol="MSFT", kind="cycle"),
    ):
        assert m.add(r)
    assert [r.memory_id for r in m.list()] == ["w", "y", "z", "x"]  # known_at, then id
    assert [r.memory_id for r in m.list(kind="cycle")] == ["w", "y"]
    assert [r.memory_id for r in m.list(symbol="AAPL", limit=2)] == ["y", "z"]
    assert [r.memory_id for r in m.list(before="2012-01-05")] == ["w"]  # strictly before
    assert m.get("nope") is None and m.get("x") == rec("x", known="2012-01-09")  # no bookkeeping fields
    assert sorted(r.memory_id for r in m.all()) == ["w", "x", "y", "z"]
    assert m.forget(memory_id="y") == 1 and m.forget(session_id="s1", symbol="MSFT") == 1 and m.count() == 2


def test_revision_changes_on_add_and_on_forget(store):
    m = store.memories
    r0 = m.revision()
    m.add(rec("a"))
    r1 = m.revision()
    m.add(rec("b"))
    r2 = m.revision()
    m.forget(memory_id="a")
    r3 = m.revision()
    assert len({r0, r1, r2, r3}) == 4


def test_racing_writers_of_one_id_store_it_once(store):
    results, barrier = [], threading.Barrier(4)

    def write(i):
        barrier.wait()
        results.append(store.memories.add(rec("same", text=f"writer {i}")))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert store.memories.count() == 1
