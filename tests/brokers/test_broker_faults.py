"""The broker backend against the fake Alpaca, each fault injected for real on the wire (the fake drops the
connection after accepting, answers 429 with Retry-After, 500/503, holds an answer past the client's timeout,
refuses an order, fills part now and the rest later). In each: exactly one order per leg reached the broker, none
was sent before its intent event was stored, the status says what filled, and reconcile is clean afterwards."""

from __future__ import annotations

import time

import pytest

from agent.brokers.client_ids import client_order_id
from graph.services.broker.reconcile import reconcile
from tests.brokers.harness import DEFAULT, backend, guard_loopback, intent_checker, run, start_fake
from tests.helpers import mock_store

SID = "s-broker"


@pytest.fixture
def env(monkeypatch):
    peers = guard_loopback(monkeypatch)
    fake = start_fake()
    store = mock_store()
    bad = intent_checker(store, fake)
    yield fake, store, bad
    fake.stop()
    assert peers and all(p[0] == "127.0.0.1" for p in peers)
    assert fake.peers <= {"127.0.0.1"}


def cids(cycle: int = 1) -> dict[str, str]:
    return {s: client_order_id(SID, f"{SID}:c{cycle}", s, i) for i, (s, _, _) in enumerate(DEFAULT)}


def one_order_per_leg(fake, cycle: int = 1) -> None:
    for symbol, cid in cids(cycle).items():
        assert len(fake.accepted(cid)) == 1, f"{symbol}: {len(fake.accepted(cid))} orders at the broker"


def clean(exe, store) -> None:
    report = reconcile(exe.broker, store, SID)
    assert report["drift"] == [] and report["clean"], report


def kinds(store, kind):
    return [e["payload"] for e in store.events.read(SID, kind=kind)]


def test_all_fill_sells_first_intents_before_acks(env):
    fake, store, bad = env
    exe = backend(store, fake)
    result = run(exe)
    assert result.status == "filled" and [o.status for o in result.result.orders] == ["filled"] * 3
    assert [o["symbol"] for o in fake.orders] == ["MSFT", "AAPL", "NVDA"]  # sells before buys
    events = store.events.read(SID)
    first_ack = min(e["seq"] for e in events if e["kind"] == "order_ack")
    assert max(e["seq"] for e in events if e["kind"] == "order_intent") < first_ack
    assert bad == [] and sum(fake.posts.values()) == 3
    one_order_per_leg(fake)
    book = store.portfolios.load(SID)
    assert book.positions["AAPL"].quantity == 10 and book.positions["MSFT"].quantity == 5
    clean(exe, store)


def test_response_lost_after_accept_finds_the_order(env):
    fake, store, bad = env
    fake.fault("POST /v2/orders", "drop")  # the first order is taken, its answer never arrives
    result = run(backend(store, fake))
    assert result.status == "filled"
    acks = kinds(store, "order_ack")
    assert [a["found_existing"] for a in acks] == [True, False, False]
    assert "ConnectionError" in acks[0]["retries"][0]
    assert bad == [] and sum(fake.posts.values()) == 3
    one_order_per_leg(fake)
    clean(backend(store, fake), store)


def test_429_waits_retry_after(env):
    fake, store, bad = env
    fake.fault("POST /v2/orders", "429", retry_after=0.4)
    started = time.monotonic()
    result = run(backend(store, fake))
    assert time.monotonic() - started >= 0.4
    assert result.status == "filled" and "HTTP 429" in kinds(store, "order_ack")[0]["retries"][0]
    assert sum(fake.posts.values()) == 4 and bad == []  # the refused POST, then one per leg
    one_order_per_leg(fake)
    clean(backend(store, fake), store)


@pytest.mark.parametrize("kind,accept", [("500", False), ("503", False), ("500", True), ("503", True)])
def test_5xx_retried_without_a_second_order(env, kind, accept):
    fake, store, bad = env
    fake.fault("POST /v2/orders", kind, accept=accept)
    result = run(backend(store, fake))
    assert result.status == "filled" and bad == []
    assert kinds(store, "order_ack")[0]["found_existing"] is accept
    one_order_per_leg(fake)
    clean(backend(store, fake), store)


def test_timeout_after_accept(env):
    fake, store, bad = env
    fake.fault("POST /v2/orders", "timeout", delay_s=1.0)
    result = run(backend(store, fake, timeout_s=0.3))
    assert result.status == "filled" and bad == []
    ack = kinds(store, "order_ack")[0]
    assert ack["found_existing"] is True and "Timeout" in ack["retries"][0]
    one_order_per_leg(fake)
    clean(backend(store, fake), store)


def test_duplicate_client_order_id_422_is_the_order_already_there(env):
    fake, store, bad = env
    exe = backend(store, fake)
    cid = cids()["MSFT"]
    with fake.lock:  # another process placed this leg and died before it stored anything
        fake.handle("POST", "/v2/orders", {}, {"client_order_id": cid, "symbol": "MSFT", "qty": "5", "side": "sell"})
    result = run(exe)
    assert result.status == "filled"
    assert fake.posts[cid] == 1  # our POST, answered 422
    assert kinds(store, "order_ack")[0]["found_existing"] is True
    one_order_per_leg(fake)


def test_rejection_stops_and_cancels_the_unfilled(env):
    fake, store, bad = env
    fake.fill["MSFT"] = "partial"  # the sell is half filled when the buy after it is refused
    fake.refuse["AAPL"] = (403, "insufficient buying power")
    result = run(backend(store, fake))
    by = {o.symbol: o for o in result.result.orders}
    assert (by["MSFT"].status, by["MSFT"].filled_quantity) == ("canceled", 2)
    assert by["AAPL"].status == "rejected" and "buying power" in by["AAPL"].reason
    assert by["NVDA"].status == "not_submitted" and cids()["NVDA"] not in fake.posts
    assert result.status == "partial"  # the cycle ends executed_with_errors, never completed
    assert [t.quantity for t in result.result.executed_trades] == [2]
    assert store.portfolios.load(SID).positions["MSFT"].quantity == 8
    assert fake.accepted(cids()["AAPL"]) == [] and len(fake.accepted(cids()["MSFT"])) == 1
    clean(backend(store, fake), store)


def test_untradable_asset_refused_before_any_submit(env):
    fake, store, bad = env
    fake.untradable.add("NVDA")
    result = run(backend(store, fake))
    assert result.status == "rejected" and fake.posts == {}
    refusals = [v for v in kinds(store, "validation") if v.get("rule") == "asset_tradable"]
    assert refusals and refusals[0]["symbol"] == "NVDA"
    assert {o.status for o in result.result.orders} == {"not_submitted"}


def test_market_closed_submits_nothing(env):
    fake, store, bad = env
    fake.market_open = False
    result = run(backend(store, fake))
    assert result.status == "rejected" and fake.posts == {} and kinds(store, "order_intent") == []
    assert [v["rule"] for v in kinds(store, "validation")] == ["market_open"]
    clean(backend(store, fake), store)


def test_partial_fill_completed_later_is_reconciled(env):
    fake, store, bad = env
    fake.fill["NVDA"] = "partial"
    result = run(backend(store, fake, fill_wait_s=0.2))
    nvda = [o for o in result.result.orders if o.symbol == "NVDA"][0]
    assert result.status == "partial" and (nvda.status, nvda.filled_quantity) == ("partially_filled", 2)
    fake.complete_partials()  # the rest fills after the cycle ended
    exe = backend(store, fake)
    report = reconcile(exe.broker, store, SID)
    assert [(u["symbol"], u["status"], u["filled_quantity"]) for u in report["updated"]] == [("NVDA", "filled", 4)]
    assert report["clean"], report
    late = [u for u in kinds(store, "order_update") if u.get("late")]
    assert [(u["symbol"], u["status"]) for u in late] == [("NVDA", "filled")]
    assert store.portfolios.load(SID).positions["NVDA"].quantity == 4
    again = reconcile(exe.broker, store, SID)
    assert again["updated"] == [] and again["clean"]
    one_order_per_leg(fake)


def test_retry_of_the_whole_cycle_sends_nothing_twice(env):
    """The cycle run again with the same ids (a restarted process): each order is found, none sent again."""
    fake, store, bad = env
    run(backend(store, fake))
    exe = backend(store, fake)
    cycle_id = f"{SID}:c1"
    portfolio = store.portfolios.load(SID)
    from tests.brokers.harness import PRICES, decision

    exe.execute(
        decision(*DEFAULT),
        cycle_id=cycle_id,
        session_id=SID,
        universe=sorted(PRICES),
        prices=PRICES,
        prev_closes={},
        portfolio=portfolio,
        as_of="2026-11-27",
    )
    assert sum(fake.posts.values()) == 3
    one_order_per_leg(fake)


def test_reconcile_reports_drift_and_the_cli_exits_1(env):
    fake, store, bad = env
    exe = backend(store, fake)
    run(exe)
    fake.positions["AAPL"] = (7.0, 20.0)  # the account changed behind tradegraph's back
    report = reconcile(exe.broker, store, SID)
    assert not report["clean"] and any(d["symbol"] == "AAPL" for d in report["drift"])
    assert kinds(store, "reconciliation")[-1]["clean"] is False


def test_orders_are_paged_past_500(env):
    fake, store, bad = env
    with fake.lock:
        for i in range(1201):
            fake.handle(
                "POST", "/v2/orders", {}, {"client_order_id": f"tg-p{i}", "symbol": "AAPL", "qty": "1", "side": "buy"}
            )
    seen = backend(store, fake).broker.orders()
    assert [o.client_order_id for o in seen] == [f"tg-p{i}" for i in range(1201)]
    assert sum(1 for m, p in fake.requests if p == "/v2/orders" and m == "GET") == 3


def test_every_attempt_fails_then_the_last_look_finds_the_order(env):
    """The retry loop's end: five 503s, then the sixth POST is taken and its answer lost; the one look after the
    last attempt finds the order instead of calling it unknown."""
    fake, store, bad = env
    fake.fault("POST /v2/orders", "503", accept=False, times=5)
    fake.fault("POST /v2/orders", "drop")
    exe = backend(store, fake)
    exe.broker.sleep = lambda s: None
    result = run(exe)
    ack = kinds(store, "order_ack")[0]
    assert result.status == "filled" and ack["found_existing"] is True and bad == []
    assert len(ack["retries"]) == 6 and "ConnectionError" in ack["retries"][-1]
    assert fake.posts[cids()["MSFT"]] == 6
    one_order_per_leg(fake)
    clean(exe, store)


def test_no_answer_after_every_attempt_is_unknown_and_stops_the_rest(env):
    fake, store, bad = env
    fake.fault("POST /v2/orders", "503", accept=False, times=6)
    exe = backend(store, fake)
    exe.broker.sleep = lambda s: None
    result = run(exe)
    by = {o.symbol: o for o in result.result.orders}
    assert by["MSFT"].status == "unknown" and "after 6 attempts" in by["MSFT"].reason
    assert by["AAPL"].status == by["NVDA"].status == "not_submitted" and fake.orders == []
    assert result.status == "partial"  # unknown is not a rejection: reconcile says what became of it
    clean(exe, store)
