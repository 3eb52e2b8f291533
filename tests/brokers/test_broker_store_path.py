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
