"""Alpaca paper trading through the official alpaca-py SDK: the calls a cycle makes, each retried on what Alpaca
says may be retried (429 after its Retry-After, 500/502/503/504, a timeout or a lost connection), and a submit
that happens once per client_order_id whatever is lost on the way.

The SDK retries 429 on its own after a fixed 3 s and never times out (requests without a timeout); both are taken
over here: its own retries are off and its session gets a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, Optional, TypeVar

import requests
from alpaca.common.enums import Sort
from alpaca.common.exceptions import APIError
from alpaca.trading.client import TradingClient
from alpaca.trading.enums import OrderSide, QueryOrderStatus, TimeInForce
from alpaca.trading.requests import GetOrdersRequest, MarketOrderRequest

from agent.brokers.orders import BrokerRejected, BrokerUnavailable, OrderView, Placed
from agent.brokers.settings import AlpacaSettings

T = TypeVar("T")
RETRYABLE = (429, 500, 502, 503, 504)


def _view(o: Any) -> OrderView:
    def num(v: Any) -> float:
        return float(v) if v not in (None, "") else 0.0

    return OrderView(
        id=str(o.id),
        client_order_id=o.client_order_id,
        symbol=str(o.symbol),
        side=str(getattr(o.side, "value", o.side)).upper(),
        qty=num(o.qty),
        filled_qty=num(o.filled_qty),
        filled_avg_price=num(o.filled_avg_price) if o.filled_avg_price not in (None, "") else None,
        status=str(getattr(o.status, "value", o.status)),
    )


class _TimedSession(requests.Session):
    def __init__(self, timeout_s: float, base_url: str):
        super().__init__()
        self.timeout_s = timeout_s
        # the environment's proxies for the broker's host, read once: requests otherwise re-reads and re-parses the
        # whole environment on every request (~1.5 ms each here, most of a cycle's client-side time)
        self.proxies.update(requests.utils.get_environ_proxies(base_url))
        self.trust_env = False
        # connections are kept alive and reused: requests' default pool keeps 10 per host, more than the 8 orders of
        # a wave (graph/machine/broker/waves.py) or the 8 checks asked at once, so none is opened per request

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout_s)
        return super().request(*args, **kwargs)


class AlpacaBroker:
    name = "alpaca"

    def __init__(
        self,
        settings: AlpacaSettings,
        *,
        timeout_s: float = 10.0,
        attempts: int = 6,
        max_wait_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.settings, self.attempts, self.max_wait_s, self.sleep = settings, attempts, max_wait_s, sleep
        self.client = TradingClient(settings.api_key, settings.secret_key, paper=True, url_override=settings.base_url)
        # TradingClient takes no retry settings: its RESTClient's are turned off here, so the SDK never sleeps its
        # fixed 3 s on a 429 itself (Retry-After is honoured below), and its session gets the timeout it lacks
        self.client._retry, self.client._retry_codes = 0, []
        self.client._session = _TimedSession(timeout_s, settings.base_url)

    # ---------------------------------------------------------------- the one retry loop
    def _wait(self, err: Exception, attempt: int) -> float:
        if isinstance(err, APIError) and err.status_code == 429 and err.response is not None:
            try:
                return min(float(err.response.headers.get("Retry-After", 1)), self.max_wait_s)
            except ValueError:
                pass
        return min(0.05 * 2**attempt, self.max_wait_s)

    def _call(self, what: str, fn: Callable[[], T], log: Optional[list[str]] = None) -> T:
        """fn() retried on what Alpaca says may be retried; each retry noted in `log` (the order_ack's `retries`).
        The one retry loop: a submit passes its own attempt (which looks the order up before any resend)."""
        return self._retry(what, lambda attempt: fn(), [] if log is None else log)

    def _retry(
        self,
        what: str,
        attempt_fn: Callable[[int], T],
        log: list[str],
        last_look: Optional[Callable[[], Optional[T]]] = None,
    ) -> T:
        last: Optional[Exception] = None
        for attempt in range(self.attempts):
            try:
                return attempt_fn(attempt)
            except APIError as e:
                if e.status_code not in RETRYABLE:
                    raise BrokerRejected(e.status_code, _message(e)) from None
                last = e
            except (requests.Timeout, requests.ConnectionError) as e:
                last = e
            log.append(f"{what}: {_describe(last)}")
            self.sleep(self._wait(last, attempt))
        found = last_look() if last_look is not None else None
        if found is not None:
            return found
        raise BrokerUnavailable(
            f"{what}: no answer from {self.settings.host} after {self.attempts} attempts ({_describe(last)})"
        )

    def account(self) -> Any:
        return self._call("GET /v2/account", self.client.get_account)

    def clock(self) -> Any:
        return self._call("GET /v2/clock", self.client.get_clock)

    def asset(self, symbol: str) -> Any:
        return self._call(f"GET /v2/assets/{symbol}", lambda: self.client.get_asset(symbol))

    def positions(self) -> dict[str, tuple[float, float]]:
        """symbol -> (signed quantity, average entry price)."""
        rows: list[Any] = list(self._call("GET /v2/positions", self.client.get_all_positions))
        return {
            p.symbol: (
                -abs(float(p.qty)) if str(getattr(p.side, "value", p.side)) == "short" else float(p.qty),
                float(p.avg_entry_price),
            )
            for p in rows
        }

    def order(self, order_id: str) -> OrderView:
        return _view(self._call(f"GET /v2/orders/{order_id}", lambda: self.client.get_order_by_id(order_id)))

    def find(self, client_order_id: str, log: Optional[list[str]] = None) -> Optional[OrderView]:
        """The order under this client id, or None when the broker has none."""
        try:
            return _view(
                self._call(
                    "GET /v2/orders:by_client_order_id",
                    lambda: self.client.get_order_by_client_id(client_order_id),
                    log,
                )
            )
        except BrokerRejected as e:
            if e.status == 404:
                return None
            raise

    def orders(self, after: Optional[datetime] = None, status: str = "all") -> list[OrderView]:
        """Every order (oldest first) created after `after`, paged 500 at a time."""
        out: list[OrderView] = []
        while True:
            req = GetOrdersRequest(status=QueryOrderStatus(status), limit=500, direction=Sort.ASC, after=after)
            page: list[Any] = list(self._call("GET /v2/orders", partial(self.client.get_orders, req)))
            out += [_view(o) for o in page]
            if len(page) < 500:
                return out
            after = page[-1].created_at

    def cancel(self, order_id: str) -> None:
        try:
            self._call(f"DELETE /v2/orders/{order_id}", lambda: self.client.cancel_order_by_id(order_id))
        except BrokerRejected as e:
            if e.status != 422:  # 422: it filled or ended meanwhile, nothing left to cancel
                raise

    # ---------------------------------------------------------------- the one submit
    def submit(self, client_order_id: str, symbol: str, side: str, qty: float, *, maybe_sent: bool = False) -> Placed:
        """Place the order once. Before any resend (and first, when a previous process may have sent it) the broker
        is asked for the order under its client id; a 422 duplicate is the order already there. Safe to call from
        several threads at once (each call keeps its own retries)."""
        req = MarketOrderRequest(
            symbol=symbol,
            qty=qty,
            side=OrderSide.BUY if side == "BUY" else OrderSide.SELL,
            time_in_force=TimeInForce.DAY,
            client_order_id=client_order_id,
        )
        log: list[str] = []

        def attempt(n: int) -> Placed:
            if maybe_sent or n > 0:
                found = self.find(client_order_id, log)
                if found is not None:
                    return Placed(found, True, log)
            try:
                return Placed(_view(self.client.submit_order(req)), False, log)
            except APIError as e:
                if e.status_code == 422 and "client_order_id" in _message(e):
                    found = self.find(client_order_id, log)
                    if found is not None:
                        return Placed(found, True, log)
                raise

        def last_look() -> Optional[Placed]:  # the last answer may have been lost after the order was taken
            found = self.find(client_order_id, log)
            return Placed(found, True, log) if found is not None else None

        return self._retry(f"POST /v2/orders {client_order_id}", attempt, log, last_look)


def _message(e: APIError) -> str:
    try:
        return str(e.message)
    except Exception:  # noqa: BLE001 - a body that is not Alpaca's JSON error
        return str(e)[:200]


def _describe(e: Optional[Exception]) -> str:
    if isinstance(e, APIError):
        return f"HTTP {e.status_code}"
    return type(e).__name__ if e is not None else "no error"
