"""The broker backend driven directly against the fake (no graph run, no model): fast fault tests and the bench.
`guard_loopback` refuses any connection that would leave 127.0.0.1."""

from __future__ import annotations

import socket
from typing import Any, Optional, Protocol

from agent.brokers.alpaca import AlpacaBroker
from agent.brokers.mandate import Mandate
from agent.brokers.settings import AlpacaSettings
from agent.config import AgentConfig
from graph.machine.broker.execution import BrokerExecution
from schemas.base import Side
from schemas.decision import Decision, Order
from schemas.execution import ExecutionResult
from schemas.portfolio import PortfolioSnapshot, Position
from tests.fakes.fake_alpaca import KEY, SECRET, FakeAlpaca

PRICES = {"AAPL": 20.0, "MSFT": 30.0, "NVDA": 50.0}
OPEN_MANDATE = Mandate(
    max_order_notional=1e9,
    max_position_notional=1e9,
    max_gross_exposure=1e9,
    max_orders_per_day=100_000,
    trading_hours="00:00-23:59",
)


def guard_loopback(monkeypatch) -> list[Any]:
    """Every socket connect of this process must go to loopback; returns the addresses connected to."""
    seen: list[Any] = []
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a socket tried to leave loopback: {address!r}")
        seen.append(address)
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


def start_fake(**kw: Any) -> FakeAlpaca:
    fake = FakeAlpaca(prices=dict(PRICES), **kw).start()
    fake.positions["MSFT"] = (10.0, 30.0)
    return fake


class Served(Protocol):
    """Where a fake broker answers: FakeAlpaca, or one running in another process (bench/bench_broker.py)."""

    @property
    def url(self) -> str: ...


def backend(
    store, fake: Served, *, mandate: Mandate = OPEN_MANDATE, timeout_s: float = 2.0, fill_wait_s: float = 0.3
) -> BrokerExecution:
    settings = AlpacaSettings(KEY, SECRET, fake.url)
    writer = store.writer()  # off-thread, as a cycle's is
    return BrokerExecution(
        store,
        AgentConfig(),
        AlpacaBroker(settings, timeout_s=timeout_s),
        mandate,
        fill_wait_s=fill_wait_s,
        poll_s=0.02,
        audit_writer=writer,
    )


def book() -> PortfolioSnapshot:
    return PortfolioSnapshot(
        cash=100_000.0, positions={"MSFT": Position(symbol="MSFT", quantity=10, avg_price=30.0)}, as_of="2026-11-27"
    )


def decision(*orders: tuple[str, Side, float]) -> Decision:
    return Decision(orders=[Order(symbol=s, side=side, quantity=q) for s, side, q in orders])


DEFAULT: tuple[tuple[str, Side, float], ...] = (("AAPL", "BUY", 10), ("MSFT", "SELL", 5), ("NVDA", "BUY", 4))


def run(
    exe: BrokerExecution,
    d: Optional[Decision] = None,
    *,
    session_id: str = "s-broker",
    cycle: int = 1,
    prices: Optional[dict[str, float]] = None,
) -> ExecutionResult:
    """What EXECUTING does with the backend: execute, then commit the result through the ledger's outbox."""
    from graph.machine.broker.checks import cycle_status

    d = d or decision(*DEFAULT)
    cycle_id = f"{session_id}:c{cycle}"
    store = exe.store
    if store.portfolios.load(session_id) is None:
        store.portfolios.commit(session_id, book(), f"{session_id}:c0", 0)
    portfolio, version = store.portfolios.load_versioned(session_id)
    assert portfolio is not None  # committed above when there was none
    prices = prices or PRICES
    res, after = exe.execute(
        d,
        cycle_id=cycle_id,
        session_id=session_id,
        universe=sorted(prices),
        prices=prices,
        prev_closes={},
        portfolio=portfolio,
        as_of="2026-11-27",
    )
    result = ExecutionResult(cycle_id=cycle_id, status=cycle_status(res), result=res, portfolio_after=after)
    exe.record(cycle_id, session_id, result.model_dump(mode="json"), base_version=version)
    assert exe.audit_writer is not None  # backend() gives it one
    exe.audit_writer.flush()
    return result


def intent_checker(store, fake: FakeAlpaca, session_id: str = "s-broker") -> list[str]:
    """Installs fake.on_post: each order POST must find its order_intent already stored. Returns the violations."""
    bad: list[str] = []

    def check(cid: str) -> None:
        if not any(e["payload"]["client_order_id"] == cid for e in store.events.read(session_id, kind="order_intent")):
            bad.append(cid)

    fake.on_post = check
    return bad
