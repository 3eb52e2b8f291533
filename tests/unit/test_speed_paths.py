"""The fast paths of issue 24's speed work give what the paths they replace gave (bench/bench_stockbench.py measures
them; these pin their answers)."""

from __future__ import annotations

import json
import math
from enum import Enum

import numpy as np
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from agent.audit_events import AUDIT_EVENT, emit
from graph.machine.audit import to_plain
from graph.machine.runner import run_state_machine
from tests.helpers import services_with


class _Kind(str, Enum):  # noqa: UP042 - a str mixin, not a StrEnum: the json module's own path is under test
    A = "a"


def _json_path(value):
    return json.loads(json.dumps(value))


def test_to_plain_equals_the_json_round_trip_on_json_data_and_types_it_does_not_know():
    samples = [
        {
            "text": "héllo \u2039x\u203a",
            "n": [1, 2.5, -0.0, 1e300, 5e-324, 0.1 + 0.2, 2**63 - 1],
            "none": None,
            "nested": {"t": (1, "two"), "b": True, "deep": [{"x": [[]]}]},
        },
        [{"role": "user", "content": "TASK: quant"}, {"tool_calls": [{"args": {"symbol": "AAPL"}}]}],
        # not JSON's own: each takes the json module's path, as before
        {"numpy": np.float64(1.5)},
        {1: "int key", True: "bool key"},  # noqa: F601 - True is 1: the collision is the case
        {"big": 2**70},
        {"enum": _Kind.A},
        {"sub": type("S", (str,), {})("x")},
    ]
    for value in samples:
        out = to_plain(value)
        assert out == _json_path(value) and type(out) is type(_json_path(value))
        assert json.dumps(out) == json.dumps(_json_path(value))
    assert type(to_plain({"numpy": np.float64(1.5)})["numpy"]) is float


def test_to_plain_copies():
    inner = {"a": [1]}
    out = to_plain({"inner": inner})
    inner["a"].append(2)
    assert out == {"inner": {"a": [1]}}


def test_to_plain_writes_a_non_finite_float_as_null_as_the_hash_chain_reads_it():
    from database.events import event_hash

    out = to_plain({"x": math.nan, "y": [math.inf, -math.inf], "z": 1.0})
    assert out == {"x": None, "y": [None, None], "z": 1.0}
    assert event_hash({"payload": {"x": math.nan}}) == event_hash({"payload": {"x": None}})


class _Recorder(BaseCallbackHandler):
    def __init__(self, name):
        self.name, self.seen = name, []

    def on_custom_event(self, name, data, *, run_id, tags=None, metadata=None, **kwargs):
        if name == AUDIT_EVENT:
            self.seen.append((data["kind"], data["payload"], run_id, (metadata or {}).get("who")))


def test_emit_reaches_each_configs_own_handlers_with_its_run_id_and_metadata():
    first, second = _Recorder("first"), _Recorder("second")
    run_ids = []

    def body(x, config):
        run_ids.append(config["callbacks"].parent_run_id)
        for i in range(3):  # the same config object again and again: one manager built, the same events
            emit("validation", {"i": i}, config)
        emit("error", {"same": x}, {**config, "metadata": {**config["metadata"], "who": "copy"}})
        return x

    step = RunnableLambda(body)
    step.invoke(1, {"callbacks": [first], "metadata": {"who": "one"}})
    step.invoke(2, {"callbacks": [second], "metadata": {"who": "two"}})
    assert first.seen == [("validation", {"i": i}, run_ids[0], "one") for i in range(3)] + [
        ("error", {"same": 1}, run_ids[0], "copy")
    ]
    assert second.seen == [("validation", {"i": i}, run_ids[1], "two") for i in range(3)] + [
        ("error", {"same": 2}, run_ids[1], "copy")
    ]
    assert run_ids[0] != run_ids[1]


def test_recall_with_cached_query_vectors_equals_recall_without():
    """A HybridIndex keeps HashedEmbeddings' query vectors; one with another embedder (here the same function under
    another class, which is never cached) ranks the same records the same way, query after query."""
    from agent.memory.embeddings import HashedEmbeddings
    from agent.memory.index import HybridIndex
    from schemas.memory import MemoryRecord

    class Uncached(HashedEmbeddings):
        pass

    words = ["above_sma50", "below_sma50", "rsi_neutral", "macd_negative", "macd_positive", "high_volatility"]
    records = [
        MemoryRecord(
            memory_id=f"m{i}",
            kind="cycle" if i % 3 else "review",
            symbol="AAPL" if i % 2 else "MSFT",
            direction="LONG",
            known_at=f"2025-03-{1 + i % 28:02d}",
            session_id="s",
            run_id="r",
            cycle_id=f"c{i}",
            text=f"setup {words[i % 6]} {words[(i * 5) % 6]}; stop target {i}",
        )
        for i in range(60)
    ]
    cached, plain = HybridIndex(), HybridIndex(Uncached())
    assert cached._queries is not None and plain._queries is None
    for index in (cached, plain):
        index.add(records)
    queries = [f"{a} {b} long stop" for a in words for b in words] * 2  # each asked twice: the second from the cache
    for q in queries:
        for symbol in ("AAPL", "MSFT"):
            got = [cached.search(q, symbol=symbol, before=d, session_id="s", k=3) for d in ("2025-03-10", "2025-03-29")]
            want = [plain.search(q, symbol=symbol, before=d, session_id="s", k=3) for d in ("2025-03-10", "2025-03-29")]
            assert got == want
    assert len(cached._queries) == len(set(queries))


def test_a_pass_binding_is_built_once_per_model_and_schema():
    from agent.offline_model import OfflineChatModel
    from agent.passes import bind_json
    from schemas.analysis import AnalystNote, QuantAnswer

    one, two = OfflineChatModel(), OfflineChatModel()
    a = bind_json(one, AnalystNote, "json_schema", 4)
    assert bind_json(one, AnalystNote, "json_schema", 4) is a
    assert bind_json(two, AnalystNote, "json_schema", 4) is not a
    assert bind_json(one, QuantAnswer, "json_schema", 4) is not a
    assert bind_json(one, AnalystNote, "json_schema", 3) is not a  # protocol 3 sends the full lean schema
    assert a.kwargs["response_format"]["json_schema"]["name"] == "AnalystNote"
    assert "ls_structured_output_format" not in a.kwargs


def test_a_providers_binding_still_carries_its_langsmith_record(monkeypatch):
    from langchain_openai import ChatOpenAI

    from agent.passes import bind_json
    from schemas.analysis import AnalystNote

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    bound = bind_json(ChatOpenAI(model="gpt-4o-mini"), AnalystNote, "json_schema", 4)
    assert bound.kwargs["ls_structured_output_format"]["schema"] is bound.kwargs["response_format"]


def _case_by_the_definition(config, market, date, idx, portfolio, prev_date):
    """build_case as first written (graph/services/backtest/loop.py before issue 24's speed work): each ticker's whole history
    read and filtered, its bars read row by row. The fast build must give the very same Case."""
    from agent.markets import bar_cutoff, fill_field, get_profile
    from graph.services.backtest.loop import untradable_reason
    from schemas.simulation import (
        Case,
        CaseData,
        CaseDataItem,
        CaseMetadata,
        IntervalPriceSummary,
        PricePoint,
        StockData,
    )

    profile = get_profile(config.market, config.decide_at)
    cutoff = bar_cutoff(profile, date)
    stock, untradable = {}, {}
    for t in config.tickers:
        today, frame = market.bars(t, date, date), market.as_of(t, cutoff)
        if today.empty or frame.empty:
            untradable[t] = untradable_reason(market, t, date, today.empty)
            continue
        tail = frame.iloc[-config.bars_in_case :]
        bars = [
            PricePoint(
                timestamp=ts.strftime("%Y-%m-%d"),
                open=float(r.open),
                high=float(r.high),
                low=float(r.low),
                close=float(r.close),
                volume=float(r.volume),
            )
            for ts, r in zip(tail.index, tail.itertuples())
        ]
        window = frame if prev_date is None else frame[frame.index > bar_cutoff(profile, prev_date)]
        window = window if len(window) else frame.iloc[-1:]
        summary = IntervalPriceSummary(
            start=window.index[0].strftime("%Y-%m-%d"),
            end=window.index[-1].strftime("%Y-%m-%d"),
            open=float(window.open.iloc[0]),
            high=float(window.high.max()),
            low=float(window.low.min()),
            close=float(window.close.iloc[-1]),
            volume=float(window.volume.sum()),
        )
        stock[t] = StockData(
            ticker=t, current_price=float(today[fill_field(profile)].iloc[0]), daily_bars=bars, interval_summary=summary
        )
    items = [CaseDataItem(kind="other", timestamp=date, content=f"{t}: {why}") for t, why in untradable.items()]
    return Case(
        case_id=f"{config.episode_id}:{idx}",
        tickers=list(stock),
        case_data=CaseData(items=items),
        stock_data=stock,
        portfolio=portfolio,
        untradable=untradable,
        metadata=CaseMetadata(decision_point_idx=idx, information_cutoff_timestamp=date),
    )


@pytest.mark.parametrize("decide_at,every", [("open", 1), ("open", 7), ("close", 3)])
def test_build_case_equals_its_definition_on_stockbenchs_window(decide_at, every):
    """Every point of StockBench's window (its Feb 11-19 gap in 16 symbols included), at the open and the close,
    points 1 and 7 and 3 sessions apart, the first point with no previous one."""
    from graph.services.backtest.loop import build_case, decision_dates
    from graph.services.benchmark.stockbench.protocol import SYMBOLS
    from graph.services.benchmark.stockbench.run import load_data
    from schemas.portfolio import PortfolioSnapshot
    from schemas.simulation import EpisodeConfig

    _, market = load_data(None)
    config = EpisodeConfig(
        episode_id="pin",
        tickers=list(SYMBOLS),
        initial_cash=100_000.0,
        start="2025-02-03",
        end="2025-06-30",
        every=every,
        market="us_equity",
        decide_at=decide_at,
    )
    dates = decision_dates(market, list(SYMBOLS), config.start, config.end, every, "us_equity", decide_at)
    book = PortfolioSnapshot(cash=100_000.0)
    untradable = 0
    for i, date in enumerate(dates):
        prev = dates[i - 1] if i else None
        fast = build_case(config, market, date, i, book, prev)
        assert fast == _case_by_the_definition(config, market, date, i, book, prev), date
        untradable += len(fast.untradable)
    assert untradable > 0 if every == 1 else True


def _split_by_definition(payloads, sessions):
    """database/blobs.py split as first written: each field encoded alone, the entry joined by hand. The fast split
    must store exactly this."""
    import hashlib

    import orjson

    from database.blobs import FIELD_INLINE_MAX, INLINE_MAX, PACK_MAX, REF, Pack

    packs, lines, index, size, out, pending = [], [], {}, 0, [], []

    def close():
        nonlocal lines, index, size, pending
        if lines:
            raw = b"\n".join(lines)
            pack = Pack(hashlib.sha256(raw).hexdigest(), raw, len(lines), sorted({sessions[p] for p, _, _ in pending}))
            packs.append(pack)
            for pos, inline, entry in pending:
                out[pos] = {REF: f"{pack.id}:{entry}", **inline}
        lines, index, size, pending = [], {}, 0, []

    for payload in payloads:
        encoded = {k: orjson.dumps(v) for k, v in payload.items()}
        if sum(len(k) + len(b) + 4 for k, b in encoded.items()) <= INLINE_MAX:
            out.append(payload)
            continue
        inline = {k: v for k, v in payload.items() if isinstance(v, str) and len(encoded[k]) <= FIELD_INLINE_MAX}
        moved = b",".join(orjson.dumps(k) + b":" + b for k, b in encoded.items() if k not in inline)
        line = b"[" + orjson.dumps(list(payload)) + b",{" + moved + b"}]"
        if size and size + len(line) > PACK_MAX:
            close()
        entry = index.get(line)
        if entry is None:
            entry = index[line] = len(lines)
            lines.append(line)
            size += len(line) + 1
        out.append(payload)
        pending.append((len(out) - 1, inline, entry))
    close()
    return packs, out


def test_split_stores_what_its_definition_stored():
    """A real cycle's payloads, and payloads at each threshold: a whole payload of 256 and 257 bytes by the rule,
    keys and strings whose JSON is longer than their characters (escapes, multi-byte text), string fields of 46 to
    49 bytes of JSON, repeats (stored once), and enough bulk to close a pack mid-batch."""
    from database import blobs
    from database.blobs import INLINE_MAX

    store = connect_mock()
    out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with())
    real = [e["payload"] for e in store.events.read(out.session_id)]
    edge = []
    for n in range(200, 270):  # around INLINE_MAX, one and two fields, keys and text that JSON escapes
        edge += [{"k": "x" * n}, {"a": 1, "text": "y" * (n - 20)}, {'é"\\k': "z" * (n - 12)}, {"k": "é" * (n // 2)}]
    for n in range(40, 52):
        edge += [
            {"name": "s" * n, "blob": "b" * 400},
            {"name": "\n" * (n // 2), "blob": "b" * 400},
            {"ñ": "ü" * (n // 2), "blob": [1, 2, {"x": "b" * 300}]},
        ]
    edge += [real[5], real[5], {}, {"n": None, "f": 1.5, "b": True, "l": []}]
    bulk = [{"text": f"{i:06d}" + "q" * 70_000} for i in range(130)]  # ~9 MB: packs close at PACK_MAX
    for payloads in (real, edge, bulk, real + edge + bulk):
        sessions = [f"s{i % 3}" for i in range(len(payloads))]
        fast, slow = blobs.split(payloads, sessions), _split_by_definition(payloads, sessions)
        assert fast == slow
    assert any(blobs._size(p) == INLINE_MAX for p in edge) and any(blobs._size(p) == INLINE_MAX + 1 for p in edge)
    assert len(blobs.split(bulk, ["s"] * len(bulk))[0]) > 1


def connect_mock():
    from tests.helpers import mock_store

    return mock_store()


def test_an_attempt_plan_reads_as_its_fields():
    from dataclasses import asdict

    from agent.config import RetryPolicy
    from agent.llm import AttemptPlan

    for attempt in (1, 2, 5):
        plan = AttemptPlan.of(RetryPolicy(), attempt)
        assert plan.as_dict() == asdict(plan) and list(plan.as_dict()) == list(asdict(plan))
        assert AttemptPlan.from_dict(plan.as_dict()) == plan
