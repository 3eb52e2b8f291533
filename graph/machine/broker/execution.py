"""EXECUTING through a real broker: what a cycle can promise when the broker cannot fill all or nothing.

1. Every check first (checks.py); any refusal and nothing is submitted.
2. Each order's intent is recorded (`broker_orders`, keyed by its client_order_id) and its `order_intent` event
   acknowledged by the store (the audit barrier) before any submit.
3. Sells before buys, in widening waves (waves.py: what a halt can still let through); a rejection (or a halt raised
   meanwhile) stops the waves still to come and cancels what has not filled.
4. The result lists every order: filled at what price, partly filled, cancelled, rejected, not submitted. A cycle
   where anything did not fill is `partial` (the cycle ends executed_with_errors), never filled/completed; what is
   still open at the broker is shown as open, and `tradegraph broker reconcile` records it when it fills.
A retry of the cycle (a killed process restarted, a lost answer) finds each order by its client_order_id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC
from typing import Any, Literal, Optional

from agent.broker import _apply
from agent.brokers.client_ids import client_order_id
from agent.brokers.mandate import Mandate, Refusal
from agent.brokers.orders import BrokerRejected, BrokerUnavailable, OrderView, Placed
from agent.config import AgentConfig
from agent.markets import bar_cutoff
from database.broker import BrokerOrders, BrokerSessions, KillSwitch
from database.connection import Store
from graph.machine.broker.checks import halted, ny_day, presubmit
from graph.machine.broker.threads import broker_threads
from graph.machine.broker.waves import waves
from graph.machine.cycle_context import run_context
from graph.machine.execution import PaperExecution
from schemas.broker import BrokerOrderOutcome
from schemas.decision import Decision, DecisionResult, Order
from schemas.events import EventKind, new_event
from schemas.portfolio import PortfolioSnapshot


class BrokerExecution(PaperExecution):
    """The paper book's ledger and outbox (lookup, record, settle_exits) with a real broker's fills."""

    def __init__(
        self,
        store: Store,
        config: AgentConfig,
        broker: Any,
        mandate: Mandate,
        *,
        fill_wait_s: float = 5.0,
        poll_s: float = 0.05,
        audit_writer: Optional[Any] = None,
    ):
        super().__init__(store, config)
        # the cycle's audit writer comes from the run's context; given here only where there is no graph run (the
        # fault tests and bench drive the backend directly)
        self.audit_writer = audit_writer
        self.broker, self.mandate = broker, mandate
        self.orders, self.switch = BrokerOrders(store.db), KillSwitch(store.db)
        self.fill_wait_s, self.poll_s = fill_wait_s, poll_s
        self.threads = broker_threads()  # started now, before the approval the cycle may wait for
        # sessions the store already binds to this broker (choose.py read it): not bound again at each cycle
        self.bound: set[str] = set()

    def manifest(self) -> dict[str, Any]:
        return {"name": self.broker.name, "host": self.broker.settings.host, "mandate": self.mandate.identity()}

    def check_mandate(
        self, decision: Decision, prices: dict[str, float], portfolio: PortfolioSnapshot
    ) -> list[Refusal]:
        """VALIDATING's check, against the book this cycle read (the broker's own positions are checked again
        right before the submit)."""
        from datetime import datetime

        now = datetime.now(UTC)
        return self.mandate.check(
            [(o.symbol, o.side, o.quantity) for o in decision.orders],
            prices,
            {s: p.quantity for s, p in portfolio.positions.items()},
            orders_today=self.orders.count_day(ny_day(now)),
            now=now,
        )

    def execute(
        self,
        decision: Decision,
        *,
        cycle_id: str,
        session_id: str,
        universe: list[str],
        prices: dict[str, float],
        prev_closes: dict[str, float],
        portfolio: PortfolioSnapshot,
        as_of: str,
    ) -> tuple[DecisionResult, PortfolioSnapshot]:
        writer = self.audit_writer or run_context().audit_writer
        if writer is None:
            raise RuntimeError("a broker cycle runs only with its audit: nothing submitted")

        def audit(kind: EventKind, payload: dict[str, Any]) -> None:
            writer.put(new_event(session_id, cycle_id, "EXECUTING", kind, payload))

        indexed = list(enumerate(decision.orders))
        legs = [
            (i, o, client_order_id(session_id, cycle_id, o.symbol, i))
            for i, o in [x for x in indexed if x[1].side == "SELL"] + [x for x in indexed if x[1].side == "BUY"]
        ]
        outcomes: dict[int, BrokerOrderOutcome] = {}
        # the binding (unless choose.py found it) and the halt, asked at once; then every check (checks.py)
        pool = self.threads
        sessions = BrokerSessions(self.store.db)
        bound = (
            None
            if session_id in self.bound
            else pool.submit(sessions.bind, session_id, self.broker.name, self.broker.settings.host)
        )
        halt_state = self.switch.state()
        if bound is not None:
            bound.result()
            self.bound.add(session_id)
        day = ny_day()
        refusals = [r for r in [halted(halt_state)] if r] or presubmit(
            self.broker,
            self.mandate,
            [o for _, o, _ in legs],
            prices,
            portfolio,
            lambda: self.orders.count_day(day),
            pool,
        )
        # a refusal stands unless an earlier attempt of this cycle recorded intents (some of its orders may be at
        # the broker, and the checks see them: the cycle is resumed, never refused half sent). Read only then: on
        # the way to the orders, the intents' own insert says what was recorded before
        if refusals and not self.orders.of_cycle(cycle_id):
            for r in refusals:
                audit("validation", r.failed_check("BrokerPrecheck", r.rule))
            for i, o, cid in legs:  # each order names the checks that concern it, or that another failed
                own = "; ".join(r.message for r in refusals if r.symbol in (None, o.symbol))
                outcomes[i] = _outcome(
                    cid, o, None, "not_submitted", own or "nothing submitted: another order failed its checks"
                )
            return _result(outcomes, decision, portfolio, as_of, "nothing submitted", as_of)
        # the intents, each acknowledged by the store before the first submit
        day = ny_day()
        priors = self.orders.intend_all(
            [
                {
                    "_id": cid,
                    "session_id": session_id,
                    "cycle_id": cycle_id,
                    "symbol": o.symbol,
                    "side": o.side,
                    "quantity": o.quantity,
                    "leg": i,
                    "day": day,
                }
                for i, o, cid in legs
            ]
        )
        for i, o, cid in legs:
            audit(
                "order_intent",
                {
                    "client_order_id": cid,
                    "symbol": o.symbol,
                    "side": o.side,
                    "quantity": o.quantity,
                    "leg": i,
                    "broker": self.broker.name,
                    "resumed": priors[cid] is not None,
                },
            )
        writer.flush(durable=True)

        legs_by = {i: cid for i, _, cid in legs}
        views, states, stop = self._send(legs, priors, audit, outcomes)
        # the local records follow the events (a process killed before this finds its orders by client id)
        states.update({legs_by[i]: _state(v) for i, v in views.items()})
        self.orders.set_state(session_id, states)
        views = self._settle(views, legs, audit, cancel=stop is not None)
        self.orders.set_state(session_id, {legs_by[i]: _state(v) for i, v in views.items()})
        for i, o, cid in legs:
            if i in views:
                v = views[i]
                outcomes[i] = _outcome(cid, o, v, v.status, stop if v.status == "canceled" else None)
        return _result(outcomes, decision, portfolio, as_of, stop, self._seen_through(as_of))

    def _send(
        self,
        legs: list[tuple[int, Order, str]],
        priors: dict[str, Any],
        audit: Callable[..., None],
        outcomes: dict[int, BrokerOrderOutcome],
    ) -> tuple[dict[int, OrderView], dict[str, dict[str, Any]], Optional[str]]:
        """Every order sent, in waves (waves.py): (the orders the broker holds, the states of those it refused or
        never answered, why the sending stopped early); what was not sent goes into `outcomes`."""
        views: dict[int, OrderView] = {}
        states: dict[str, dict[str, Any]] = {}
        stop: Optional[str] = None
        pool = self.threads
        for wave in waves(legs):
            if stop is None:  # a halt raised meanwhile, from any process, stops the waves still to come
                halt = halted(self.switch.state())
                stop = halt.message if halt else None
            if stop is not None:
                for i, o, cid in wave:
                    found = self._find(cid) if priors[cid] is not None else None  # a killed attempt sent it?
                    if found is None:
                        outcomes[i] = _outcome(cid, o, None, "not_submitted", stop)
                    else:
                        views[i] = found
                        audit("order_ack", _ack(cid, Placed(found, True, [])))
                continue
            answers = (
                list(pool.map(lambda leg: self._place(leg, priors[leg[2]] is not None), wave))
                if len(wave) > 1
                else [self._place(wave[0], priors[wave[0][2]] is not None)]
            )
            for (i, o, cid), answer in zip(wave, answers):
                if isinstance(answer, Placed):
                    views[i] = answer.view
                    audit("order_ack", _ack(cid, answer))
                    continue
                # rejected for good, or no answer after every retry (it may or may not exist: reconcile says)
                status = "rejected" if isinstance(answer, BrokerRejected) else "unknown"
                reason = answer.reason if isinstance(answer, BrokerRejected) else str(answer)
                states[cid] = {"state": status, "reason": reason} | (
                    {"status": "rejected"} if status == "rejected" else {}
                )
                audit("order_update", {"client_order_id": cid, "symbol": o.symbol, "status": status, "reason": reason})
                outcomes[i] = _outcome(cid, o, None, status, reason)
                stop = stop or (
                    f"{o.side} {o.quantity:g} {o.symbol} was rejected ({reason})"
                    if status == "rejected"
                    else f"no answer for {o.side} {o.quantity:g} {o.symbol}"
                )
        return views, states, stop

    def _place(self, leg: tuple[int, Order, str], maybe_sent: bool) -> Placed | BrokerRejected | BrokerUnavailable:
        _, o, cid = leg
        try:
            return self.broker.submit(cid, o.symbol, o.side, o.quantity, maybe_sent=maybe_sent)
        except (BrokerRejected, BrokerUnavailable) as e:
            return e

    def _seen_through(self, as_of: str) -> str:
        return str(bar_cutoff(self.profile, as_of).date())

    def _find(self, cid: str) -> Optional[OrderView]:
        try:
            return self.broker.find(cid)
        except (BrokerRejected, BrokerUnavailable):
            return None

    def _settle(self, views: dict[int, OrderView], legs: list, audit, *, cancel: bool) -> dict[int, OrderView]:
        """Wait (up to fill_wait_s) for the submitted orders to end; after a rejection or a halt, cancel what has
        not filled. Every change the broker reports is an `order_update`."""
        cids = {i: cid for i, _, cid in legs}
        deadline = time.monotonic() + self.fill_wait_s

        def refresh(i: int) -> None:
            try:
                new = self.broker.order(views[i].id)
            except (BrokerRejected, BrokerUnavailable):
                return
            if (new.status, new.filled_qty) != (views[i].status, views[i].filled_qty):
                audit(
                    "order_update",
                    {
                        "client_order_id": cids[i],
                        "broker_order_id": new.id,
                        "symbol": new.symbol,
                        "status": new.status,
                        "filled_quantity": new.filled_qty,
                        "avg_price": new.filled_avg_price,
                    },
                )
            views[i] = new

        if cancel:
            for i, v in list(views.items()):
                if v.open:
                    try:
                        self.broker.cancel(v.id)
                    except (BrokerRejected, BrokerUnavailable):
                        pass
                    refresh(i)
        while any(v.open for v in views.values()) and time.monotonic() < deadline:
            time.sleep(self.poll_s)
            for i, v in list(views.items()):
                if v.open:
                    refresh(i)
        return views


def _ack(cid: str, placed: Placed) -> dict[str, Any]:
    v = placed.view
    return {
        "client_order_id": cid,
        "broker_order_id": v.id,
        "status": v.status,
        "filled_quantity": v.filled_qty,
        "avg_price": v.filled_avg_price,
        "found_existing": placed.existing,
        "retries": list(placed.retries),
    }


def _state(v: OrderView) -> dict[str, Any]:
    return {
        "state": "acked",
        "broker_order_id": v.id,
        "status": v.status,
        "filled_quantity": v.filled_qty,
        "avg_price": v.filled_avg_price,
    }


def _outcome(cid: str, o: Order, v: Optional[OrderView], status: str, reason: Optional[str]) -> BrokerOrderOutcome:
    return BrokerOrderOutcome(
        client_order_id=cid,
        broker_order_id=v.id if v else None,
        symbol=o.symbol,
        side=o.side,
        quantity=o.quantity,
        filled_quantity=v.filled_qty if v else 0.0,
        avg_price=v.filled_avg_price if v and v.filled_qty > 0 else None,
        status=status,
        reason=reason[:500] if reason else None,
    )


def _result(
    outcomes: dict[int, BrokerOrderOutcome],
    decision: Decision,
    portfolio: PortfolioSnapshot,
    as_of: str,
    stop: Optional[str],
    seen_through: str,
) -> tuple[DecisionResult, PortfolioSnapshot]:
    """What the broker confirmed, and only that: the book moves by the filled quantities at their prices."""
    rows = [outcomes[i] for i in sorted(outcomes)]
    fills, cash = [], portfolio.cash
    for i in sorted(outcomes):
        r = outcomes[i]
        if r.filled_quantity > 0 and r.avg_price:
            o = decision.orders[i].model_copy(update={"quantity": r.filled_quantity})
            fills.append((i, o, r.avg_price, 0.0))
            cash += (-1 if r.side == "BUY" else 1) * r.filled_quantity * r.avg_price
    filled = sum(1 for r in rows if r.status == "filled")
    parts = [f"{filled} of {len(rows)} order(s) filled"]
    parts += [
        f"{r.side} {r.quantity:g} {r.symbol}: {r.status}"
        + (f" ({r.filled_quantity:g} filled)" if 0 < r.filled_quantity < r.quantity else "")
        + (f" — {r.reason}" if r.reason else "")
        for r in rows
        if r.status != "filled"
    ]
    message = "; ".join(parts)[:2000]
    if not fills:
        status: Literal["accepted", "rejected"] = (
            "accepted" if any(r.status not in ("not_submitted", "rejected", "canceled") for r in rows) else "rejected"
        )
        return DecisionResult(status=status, message=message, orders=rows), portfolio
    res, after = _apply(fills, portfolio, as_of, cash, seen_through)
    return DecisionResult(status="accepted", message=message, executed_trades=res.executed_trades, orders=rows), after
