"""Orders sent in widening waves (graph/machine/broker/waves.py): faults injected on the wire while a wave's orders
are at the broker together. The fake holds each POST of the 4-order wave until all four have arrived, so every test
proves those orders really were in flight at once (sent one at a time, the hold times out and the test fails).
In each: one order per leg at the broker, none sent before its intent event was stored, every sell before any buy,
the status true, reconcile clean."""

from __future__ import annotations

import threading
from typing import Any, Optional

import pytest

from agent.brokers.client_ids import client_order_id
from database.broker import KillSwitch
from graph.machine.broker.waves import WIDEST, waves
from graph.services.broker.reconcile import reconcile
from tests.brokers.harness import backend, decision, guard_loopback, intent_checker, run
from tests.fakes.fake_alpaca import FakeAlpaca, Fault
from tests.helpers import mock_store

SID = "s-broker"
BUYS = [f"B{i}" for i in range(8)]
PRICES = {"MSFT": 30.0} | {s: 10.0 for s in BUYS}
ORDERS = [("MSFT", "SELL", 5.0)] + [(s, "BUY", 10.0) for s in BUYS]  # waves: MSFT | B0 | B1 B2 | B3-B6 | B7
WIDE = BUYS[3:7]


def cid(symbol: str) -> str:
    return client_order_id(SID, f"{SID}:c1", symbol, [o[0] for o in ORDERS].index(symbol))


class WaveFake(FakeAlpaca):
    """The fake Alpaca, plus: the wide wave's POSTs are held until all of them are in (`peak`: how many were at the
    broker at once), and `drop_cid`'s first answer is lost after its order was taken."""

    def setup_wave(self) -> WaveFake:
        self.barrier = threading.Barrier(len(WIDE), timeout=3)
        self.peak = 0
        self.drop_cid: Optional[str] = None
        self.at_post: list[Any] = []  # more per-POST checks, run in the handler before the hold
        self.posted: list[str] = []  # client ids in the order their POSTs arrived
        self._handling = threading.local()
        return self

    def hook(self, cid_: str) -> None:
        self._handling.cid = cid_
        with self.lock:
            self.posted.append(cid_)
        for check in self.at_post:
            check(cid_)
        if cid_ in {cid(s) for s in WIDE}:
            try:
                self.barrier.wait()
                with self.lock:
                    self.peak = len(WIDE)
            except threading.BrokenBarrierError:
                pass  # they did not all arrive together: peak stays below the wave's width

    def take_fault(self, route: str) -> Optional[Fault]:
        if (
            route == "POST /v2/orders"
            and self.drop_cid is not None
            and getattr(self._handling, "cid", None) == self.drop_cid
        ):
            self.drop_cid = None
            return Fault(route, "drop")
        return super().take_fault(route)


@pytest.fixture
def env(monkeypatch):
    peers = guard_loopback(monkeypatch)
    fake = WaveFake(prices=dict(PRICES)).setup_wave().start()
    fake.positions["MSFT"] = (10.0, 30.0)
    store = mock_store()
    bad = intent_checker(store, fake)
    fake.at_post.append(fake.on_post)  # the intent check first, then the hold
    fake.on_post = fake.hook
    yield fake, store, bad
    fake.stop()
    assert peers and all(p[0] == "127.0.0.1" for p in peers)


def go(store, fake, **kw):
    return run(backend(store, fake, **kw), decision(*ORDERS), prices=PRICES)


def one_order_per_sent_leg(fake, sent: list[str]) -> None:
    for s in [o[0] for o in ORDERS]:
        assert len(fake.accepted(cid(s))) == (1 if s in sent else 0), s


def clean(fake, store) -> None:
    report = reconcile(backend(store, fake).broker, store, SID)
    assert report["drift"] == [] and report["clean"], report


def test_waves_widen_per_side_sells_first():
    legs = [
        (i, o, f"c{i}")
        for i, o in enumerate(
            decision(("A", "SELL", 1), ("B", "SELL", 1), *[(f"X{k}", "BUY", 1) for k in range(20)]).orders
        )
    ]
    shape = [[o.side for _, o, _ in w] for w in waves(legs)]
    assert [len(w) for w in shape] == [1, 1, 1, 2, 4, 8, 5] and WIDEST == 8
    assert shape[:2] == [["SELL"], ["SELL"]] and all(set(w) == {"BUY"} for w in shape[2:])


def test_answer_lost_for_one_of_the_concurrent_buys(env):
    fake, store, bad = env
    fake.drop_cid = cid("B4")  # B4's order is taken; its answer never comes while B3, B5, B6 are out too
    result = go(store, fake)
    assert fake.peak == len(WIDE)
    assert result.status == "filled" and bad == []
    assert fake.orders[0]["symbol"] == "MSFT" and fake.posted[0] == cid("MSFT")  # the sell before any buy
    acks = {a["client_order_id"]: a for a in (e["payload"] for e in store.events.read(SID, kind="order_ack"))}
    assert acks[cid("B4")]["found_existing"] is True and "ConnectionError" in acks[cid("B4")]["retries"][0]
    assert [c for c, a in acks.items() if a["found_existing"]] == [cid("B4")]
    assert fake.posts[cid("B4")] == 1 and sum(fake.posts.values()) == len(ORDERS)  # found by its id, not resent
    one_order_per_sent_leg(fake, [o[0] for o in ORDERS])
    clean(fake, store)


def test_a_rejected_buy_stops_later_waves_and_cancels_what_has_not_filled(env):
    fake, store, bad = env
    for s in BUYS:
        fake.fill[s] = "hold"  # the buys stay open at the broker
    fake.refuse["B5"] = (403, "insufficient buying power")
    result = go(store, fake)
    assert fake.peak == len(WIDE) and bad == []
    by = {o.symbol: o for o in result.result.orders}
    assert by["MSFT"].status == "filled"
    assert by["B5"].status == "rejected" and "buying power" in by["B5"].reason
    assert by["B7"].status == "not_submitted" and cid("B7") not in fake.posts  # the wave after it never left
    cancelled = [s for s in BUYS if s not in ("B5", "B7")]
    assert all(by[s].status == "canceled" for s in cancelled), {s: by[s].status for s in BUYS}
    assert {o["symbol"]: o["status"] for o in fake.orders if o["side"] == "buy"} == dict.fromkeys(cancelled, "canceled")
    assert result.status == "partial"  # executed_with_errors, never completed
    one_order_per_sent_leg(fake, ["MSFT"] + cancelled)
    clean(fake, store)


def test_a_halt_raised_mid_wave_stops_every_later_wave(env):
    """The window that remains: a halt stored after a wave's read lets that wave's orders (at most WIDEST) reach
    the broker; every later wave is stopped."""
    fake, store, bad = env
    halted_at: list[int] = []

    def halt_at_first_wide_post(cid_: str) -> None:
        with fake.lock:  # the first of the wave's POSTs to arrive, whichever it is
            if cid_ in {cid(s) for s in WIDE} and not halted_at:
                KillSwitch(store.db).set(True, by="ops", reason="test")
                halted_at.append(len(fake.posted))

    fake.at_post.append(halt_at_first_wide_post)
    result = go(store, fake)
    by = {o.symbol: o for o in result.result.orders}
    after_halt = fake.posted[halted_at[0] :]
    assert fake.peak == len(WIDE)
    assert set(after_halt) <= {cid(s) for s in WIDE} and len(after_halt) < WIDEST  # only the wave under way
    assert by["B7"].status == "not_submitted" and "halted by ops" in by["B7"].reason and cid("B7") not in fake.posts
    assert all(by[s].status == "filled" for s in ["MSFT", *BUYS[:7]])
    assert result.status == "partial" and bad == []
    one_order_per_sent_leg(fake, ["MSFT", *BUYS[:7]])
    KillSwitch(store.db).set(False, by="ops")
    clean(fake, store)
