"""memory_search through the kernel: the hits an agent would recall, point in time; bad input named."""

from __future__ import annotations

import uuid

import pytest

from graph.kernel import Kernel
from graph.kernel import errors as E
from graph.transports.client import Client
from schemas.memory import MemoryRecord


@pytest.fixture
def client(tmp_path):
    k = Kernel.open(f"mongomock://ms_{uuid.uuid4().hex[:10]}", experiments_dir=tmp_path / "x", env={})
    for i, known in enumerate(("2012-01-02", "2012-02-01", "2012-03-01")):
        k.store.memories.add(
            MemoryRecord(
                memory_id=f"m{i}",
                kind="review",
                symbol="AAPL",
                direction="LONG",
                outcome="loss",
                signal="Falsified",
                known_at=known,
                session_id="s",
                text=f"AAPL LONG setup uptrend stop exit lesson {i}",
            )
        )
    c = Client.local(kernel=k)
    yield c
    c.close()


def test_hits_are_point_in_time_with_their_ranks(client):
    out = client.memory_search("aapl", "stop uptrend", "2012-03-01")
    assert [h.memory_id for h in out.hits] and {h.memory_id for h in out.hits} == {"m0", "m1"}
    assert out.filter == {"symbol": "AAPL", "known_before": "2012-03-01", "session_id": None, "k": 5}
    assert all(h.score == pytest.approx(1 / (60 + h.bm25_rank) + 1 / (60 + h.dense_rank), abs=1e-8) for h in out.hits)


@pytest.mark.parametrize(
    "args,needle", [({"as_of": "2012-13-01"}, "2012-13-01"), ({"k": 0}, "k"), ({"query": ""}, "query")]
)
def test_bad_input_is_named(client, args, needle):
    base = {"symbol": "AAPL", "query": "stop", "as_of": "2012-03-01", **args}
    with pytest.raises(E.BadInput) as err:
        client.memory_search(**base)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_over_http_the_same_hits_and_a_422_naming_the_date(client):
    from fastapi.testclient import TestClient

    from graph.transports.http import create_app

    http = TestClient(create_app(client._b.kernel))
    r = http.get("/memory/AAPL", params={"query": "stop uptrend", "as_of": "2012-03-01"})
    assert r.status_code == 200
    assert [h["memory_id"] for h in r.json()["hits"]] == [
        h.memory_id for h in client.memory_search("AAPL", "stop uptrend", "2012-03-01").hits
    ]
    bad = http.get("/memory/AAPL", params={"query": "stop", "as_of": "2012-02-30"})
    assert bad.status_code == 422 and "2012-02-30" in bad.json()["message"]
