"""The store's part of a broker cycle's path from approval to its orders: what is asked once is not asked again. A
session the store already binds to its broker (read when the backend is chosen, graph/machine/broker/choose.py) is
not bound again by each cycle: one upsert fewer before the checks."""

from __future__ import annotations

from agent.config import AgentConfig
from database.broker import BrokerSessions
from graph.machine.broker.choose import execution_for
from tests.brokers.harness import guard_loopback, run, start_fake
from tests.fakes.fake_alpaca import KEY, SECRET
from tests.helpers import mock_store


def test_a_session_bound_before_is_not_bound_again_by_its_cycle(tmp_path, monkeypatch):
    guard_loopback(monkeypatch)
    fake = start_fake()
    mandate = tmp_path / "mandate.toml"
    mandate.write_text(
        'trading_hours = "00:00-23:59"\nmax_order_notional = 1e9\nmax_position_notional = 1e9\n'
        "max_gross_exposure = 1e9\n"
    )
    env = {"ALPACA_API_KEY": KEY, "ALPACA_SECRET_KEY": SECRET, "ALPACA_BASE_URL": fake.url}
    env["TRADEGRAPH_MANDATE"] = str(mandate)
    store = mock_store()
    binds: list[str] = []
    real = BrokerSessions.bind

    def counted(self, session_id: str, broker: str, host: str) -> None:
        binds.append(session_id)
        real(self, session_id, broker, host)

    monkeypatch.setattr(BrokerSessions, "bind", counted)
    try:
        # a session started elsewhere (the run that paused for approval bound it): only read here
        real(BrokerSessions(store.db), "s-broker", "alpaca", "127.0.0.1")
        exe = execution_for(store, AgentConfig(), session_id="s-broker", env=env)
        exe.audit_writer, exe.fill_wait_s = store.writer(), 0.3
        result = run(exe)
        assert result.status == "filled", result.result.message
        assert binds == []
        # a session the backend did not find bound (the fault tests' direct drive) is bound by its first cycle, once
        fresh = execution_for(store, AgentConfig(), broker="alpaca", env=env)
        fresh.audit_writer, fresh.fill_wait_s = store.writer(), 0.3
        run(fresh, session_id="s-other")
        run(fresh, session_id="s-other", cycle=2)
        assert binds == ["s-other"] and BrokerSessions(store.db).broker_of("s-other") == "alpaca"
    finally:
        fake.stop()
        store.close()


def test_a_resumed_attempt_is_not_refused_by_checks_its_own_orders_fail(monkeypatch):
    """The checks run on every attempt, but this cycle's earlier intents are read only when one refuses: a resumed
    attempt (a killed approver's intents stored, one of its orders at the broker) whose checks now refuse is not
    refused half sent; it finds its order by client id and sends only the others."""
    from agent.brokers.client_ids import client_order_id
    from database.broker import BrokerOrders
    from tests.brokers.harness import DEFAULT, backend

    guard_loopback(monkeypatch)
    fake, store = start_fake(), mock_store()
    try:
        exe = backend(store, fake)
        sid, cycle = "s-broker", "s-broker:c1"
        legs = [(i, s, side, q, client_order_id(sid, cycle, s, i)) for i, (s, side, q) in enumerate(DEFAULT)]
        # what the killed attempt left: every intent stored, its first order (the sell) taken by the broker
        BrokerOrders(store.db).intend_all(
            [
                {"_id": c, "session_id": sid, "cycle_id": cycle, "symbol": s, "side": side, "quantity": q, "leg": i}
                for i, s, side, q, c in legs
            ]
        )
        sell = next(leg for leg in legs if leg[2] == "SELL")
        fake.handle(
            "POST", "/v2/orders", {}, {"client_order_id": sell[4], "symbol": sell[1], "qty": "5", "side": "sell"}
        )
        fake.market_open = False  # the checks now refuse (market_open), as they did not for the first attempt
        result = run(exe)
        assert [e["payload"].get("rule") for e in store.events.read(sid, kind="validation")] == []
        assert {o.client_order_id: o.status for o in result.result.orders}.keys() == {c for *_, c in legs}
        assert all(o.status != "not_submitted" for o in result.result.orders), result.result.message
        assert fake.posts == {c: 1 for *_, c in legs if c != sell[4]}  # the sell found, never sent again
        acks = {e["payload"]["client_order_id"]: e["payload"] for e in store.events.read(sid, kind="order_ack")}
        assert acks[sell[4]]["found_existing"] is True
    finally:
        fake.stop()
        store.close()
