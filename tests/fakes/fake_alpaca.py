"""A local Alpaca Trading API v2 for tests: account, clock, assets, orders (by id and by client_order_id),
positions, served on 127.0.0.1 in the JSON shapes alpaca-py's models parse (alpaca/trading/models.py: TradeAccount,
Clock, Asset, Order, Position), so the adapter is driven through the real SDK and the real HTTP stack.

It behaves as Alpaca documents: a duplicate client_order_id is a 422; insufficient buying power is a 403; an asset
that is not tradable is a 422. `fault(...)` scripts one misbehaviour on the next request it matches (a response lost
after the order was accepted, 429 with Retry-After, 500/503, a timeout); `fill` per symbol says how an order fills
(at once, half now and the rest on `complete_partials()`, or held open until `fill_open()`). Every order POST is
counted per client_order_id, so a test can assert exactly one order per leg reached the broker.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlparse

KEY, SECRET = "PKTEST", "fake-secret"
OPEN = ("new", "accepted", "partially_filled", "pending_new")


@dataclass
class Fault:
    route: str  # "POST /v2/orders", "GET /v2/orders:by_client_order_id", ... ("*" any)
    kind: str  # drop | 429 | 500 | 503 | timeout
    accept: bool = True  # an order POST: is the order taken before the response goes wrong
    retry_after: float = 0.05
    delay_s: float = 2.0  # timeout: how long the answer is held back
    times: int = 1


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FakeAlpaca:
    cash: float = 100_000.0
    prices: dict[str, float] = field(default_factory=dict)
    untradable: set[str] = field(default_factory=set)
    unfractionable: set[str] = field(default_factory=set)
    unshortable: set[str] = field(default_factory=set)
    fill: dict[str, str] = field(default_factory=dict)  # symbol -> now | partial | hold
    market_open: bool = True
    latency_s: float = 0.0
    account_status: str = "ACTIVE"
    # symbol -> (HTTP status, message): the broker refuses that symbol's next orders at submit (a halted stock,
    # a buying power the account lost meanwhile), after the checks before the submit passed
    refuse: dict[str, tuple[int, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self.orders: list[dict[str, Any]] = []
        self.positions: dict[str, tuple[float, float]] = {}  # symbol -> (qty, avg price)
        self.faults: list[Fault] = []
        self.posts: dict[str, int] = {}  # client_order_id -> order POSTs that reached the handler
        self.requests: list[tuple[str, str]] = []
        self.peers: set[str] = set()
        self._clock = time.time()
        self.server: Optional[ThreadingHTTPServer] = None
        # called with the client_order_id of every order POST before it is handled: a test checks there that the
        # order's intent event is already in the store
        self.on_post: Optional[Any] = None
        # (arrived, answered) per request, time.time() (comparable across processes): the broker's own time, which the bench subtracts
        self.served: list[tuple[float, float]] = []
        self.last_post_at = 0.0

    # ------------------------------------------------------------------ test controls
    def fault(self, route: str, kind: str, **kw: Any) -> None:
        with self.lock:
            self.faults.append(Fault(route, kind, **kw))

    def accepted(self, cid: Optional[str] = None) -> list[dict[str, Any]]:
        with self.lock:
            return [o for o in self.orders if cid is None or o["client_order_id"] == cid]

    def complete_partials(self) -> None:
        """The rest of every partially filled order fills (a fill that arrives later)."""
        with self.lock:
            for o in self.orders:
                if o["status"] == "partially_filled":
                    self._fill(o, float(o["qty"]) - float(o["filled_qty"]))

    def fill_open(self) -> None:
        with self.lock:
            for o in self.orders:
                if o["status"] in OPEN:
                    self._fill(o, float(o["qty"]) - float(o["filled_qty"]))

    def start(self) -> FakeAlpaca:
        fake = self

        class Handler(_Handler):
            broker = fake

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # ------------------------------------------------------------------ the broker's book
    def _now(self) -> float:
        self._clock = max(time.time(), self._clock + 1e-6)  # strictly increasing: orders page by created_at
        return self._clock

    def _fill(self, o: dict[str, Any], qty: float) -> None:
        if qty <= 0:
            return
        sym, price = o["symbol"], self.prices[o["symbol"]]
        held, avg = self.positions.get(sym, (0.0, 0.0))
        sign = 1 if o["side"] == "buy" else -1
        if sign > 0:
            avg = (held * avg + qty * price) / (held + qty)
        held += sign * qty
        self.cash -= sign * qty * price
        if abs(held) < 1e-9:
            self.positions.pop(sym, None)
        else:
            self.positions[sym] = (held, avg)
        done = float(o["filled_qty"]) + qty
        prev = float(o["filled_avg_price"] or 0)
        o["filled_avg_price"] = str(round((prev * float(o["filled_qty"]) + price * qty) / done, 6))
        o["filled_qty"] = f"{done:g}"
        full = done >= float(o["qty"]) - 1e-9
        o["status"] = "filled" if full else "partially_filled"
        o["updated_at"] = _iso(self._now())
        if full:
            o["filled_at"] = o["updated_at"]

    def _order(self, body: dict[str, Any]) -> tuple[int, Any]:
        cid = body.get("client_order_id") or uuid.uuid4().hex
        sym = str(body.get("symbol", "")).upper()
        if any(o["client_order_id"] == cid for o in self.orders):
            return 422, {"code": 40010001, "message": "client_order_id must be unique"}
        if sym not in self.prices:
            return 422, {"code": 40010001, "message": f"asset {sym} not found"}
        if sym in self.untradable:
            return 422, {"code": 42210000, "message": f"asset {sym} is not tradable"}
        if sym in self.refuse:
            status, message = self.refuse[sym]
            return status, {"code": status * 100000, "message": message}
        qty, side = float(body["qty"]), body["side"]
        if side == "buy" and qty * self.prices[sym] > self._buying_power():
            return 403, {"code": 40310000, "message": "insufficient buying power"}
        now = _iso(self._now())
        o = {
            "id": str(uuid.uuid4()),
            "client_order_id": cid,
            "created_at": now,
            "updated_at": now,
            "submitted_at": now,
            "filled_at": None,
            "expired_at": None,
            "canceled_at": None,
            "failed_at": None,
            "replaced_at": None,
            "replaced_by": None,
            "replaces": None,
            "asset_id": _asset_id(sym),
            "symbol": sym,
            "asset_class": "us_equity",
            "notional": None,
            "qty": f"{qty:g}",
            "filled_qty": "0",
            "filled_avg_price": None,
            "order_class": "simple",
            "order_type": "market",
            "type": "market",
            "side": side,
            "time_in_force": body.get("time_in_force", "day"),
            "limit_price": None,
            "stop_price": None,
            "status": "accepted" if not self.market_open else "new",
            "extended_hours": False,
            "legs": None,
            "trail_percent": None,
            "trail_price": None,
            "hwm": None,
        }
        self.orders.append(o)
        mode = self.fill.get(sym, "now")
        if self.market_open and mode == "now":
            self._fill(o, qty)
        elif self.market_open and mode == "partial":
            self._fill(o, max(1.0, float(int(qty / 2))) if qty > 1 else qty / 2)
        return 200, dict(o)

    def _buying_power(self) -> float:
        reserved = sum(
            (float(o["qty"]) - float(o["filled_qty"])) * self.prices[o["symbol"]]
            for o in self.orders
            if o["status"] in OPEN and o["side"] == "buy"
        )
        return self.cash - reserved

    def _account(self) -> dict[str, Any]:
        value = sum(q * self.prices.get(s, a) for s, (q, a) in self.positions.items())
        return {
            "id": "3f5c2a4e-0000-4000-8000-000000000001",
            "account_number": "PA0000FAKE",
            "status": self.account_status,
            "crypto_status": "ACTIVE",
            "currency": "USD",
            "buying_power": f"{self._buying_power():.2f}",
            "regt_buying_power": f"{self._buying_power():.2f}",
            "daytrading_buying_power": "0",
            "non_marginable_buying_power": f"{self._buying_power():.2f}",
            "cash": f"{self.cash:.2f}",
            "accrued_fees": "0",
            "portfolio_value": f"{self.cash + value:.2f}",
            "pattern_day_trader": False,
            "trading_blocked": False,
            "transfers_blocked": False,
            "account_blocked": False,
            "created_at": _iso(time.time() - 86400),
            "trade_suspended_by_user": False,
            "multiplier": "1",
            "shorting_enabled": True,
            "equity": f"{self.cash + value:.2f}",
            "last_equity": f"{self.cash + value:.2f}",
            "long_market_value": f"{value:.2f}",
            "short_market_value": "0",
            "initial_margin": "0",
            "maintenance_margin": "0",
            "last_maintenance_margin": "0",
            "sma": "0",
            "daytrade_count": 0,
        }

    def _clock_doc(self) -> dict[str, Any]:
        now = time.time()
        return {
            "timestamp": _iso(now),
            "is_open": self.market_open,
            "next_open": _iso(now + (0 if self.market_open else 3600)),
            "next_close": _iso(now + 3600 * 6),
        }

    def _asset(self, sym: str) -> tuple[int, Any]:
        if sym not in self.prices:
            return 404, {"code": 40410000, "message": "asset not found"}
        return 200, {
            "id": _asset_id(sym),
            "class": "us_equity",
            "exchange": "NASDAQ",
            "symbol": sym,
            "name": sym,
            "status": "active",
            "tradable": sym not in self.untradable,
            "marginable": True,
            "shortable": sym not in self.unshortable,
            "easy_to_borrow": True,
            "fractionable": sym not in self.unfractionable,
        }

    def _position(self, sym: str) -> dict[str, Any]:
        qty, avg = self.positions[sym]
        px = self.prices.get(sym, avg)
        return {
            "asset_id": _asset_id(sym),
            "symbol": sym,
            "exchange": "NASDAQ",
            "asset_class": "us_equity",
            "asset_marginable": True,
            "avg_entry_price": f"{avg:g}",
            "qty": f"{qty:g}",
            "side": "long" if qty > 0 else "short",
            "market_value": f"{qty * px:.2f}",
            "cost_basis": f"{qty * avg:.2f}",
            "unrealized_pl": f"{qty * (px - avg):.2f}",
            "unrealized_plpc": "0",
            "unrealized_intraday_pl": "0",
            "unrealized_intraday_plpc": "0",
            "current_price": f"{px:g}",
            "lastday_price": f"{px:g}",
            "change_today": "0",
            "qty_available": f"{qty:g}",
        }

    def _list_orders(self, q: dict[str, str]) -> list[dict[str, Any]]:
        status = q.get("status", "open")
        rows = [o for o in self.orders if status == "all" or (o["status"] in OPEN) == (status == "open")]
        if q.get("after"):
            after = datetime.fromisoformat(q["after"].replace(" ", "+"))  # a '+' of the query string may arrive as ' '
            rows = [o for o in rows if datetime.fromisoformat(o["created_at"]) > after]
        if q.get("symbols"):
            rows = [o for o in rows if o["symbol"] in q["symbols"].split(",")]
        rows.sort(key=lambda o: o["created_at"], reverse=q.get("direction", "desc") == "desc")
        return [dict(o) for o in rows[: min(int(q.get("limit", 50)), 500)]]

    def handle(self, method: str, path: str, q: dict[str, str], body: Any) -> tuple[int, Any]:
        with self.lock:
            if method == "GET" and path == "/v2/account":
                return 200, self._account()
            if method == "GET" and path == "/v2/clock":
                return 200, self._clock_doc()
            if method == "GET" and path.startswith("/v2/assets/"):
                return self._asset(path.rsplit("/", 1)[1].upper())
            if method == "POST" and path == "/v2/orders":
                return self._order(body or {})
            if method == "GET" and path == "/v2/orders:by_client_order_id":
                found = [o for o in self.orders if o["client_order_id"] == q.get("client_order_id")]
                return (200, dict(found[0])) if found else (404, {"code": 40410000, "message": "order not found"})
            if method == "GET" and path == "/v2/orders":
                return 200, self._list_orders(q)
            if method == "GET" and path.startswith("/v2/orders/"):
                found = [o for o in self.orders if o["id"] == path.rsplit("/", 1)[1]]
                return (200, dict(found[0])) if found else (404, {"code": 40410000, "message": "order not found"})
            if method == "DELETE" and path.startswith("/v2/orders/"):
                found = [o for o in self.orders if o["id"] == path.rsplit("/", 1)[1]]
                if not found:
                    return 404, {"code": 40410000, "message": "order not found"}
                if found[0]["status"] not in OPEN:
                    return 422, {"code": 42210000, "message": f'order is already in "{found[0]["status"]}" state'}
                found[0].update(status="canceled", canceled_at=_iso(self._now()))
                return 204, None
            if method == "GET" and path == "/v2/positions":
                return 200, [self._position(s) for s in sorted(self.positions)]
            if method == "GET" and path.startswith("/v2/positions/"):
                sym = path.rsplit("/", 1)[1].upper()
                if sym not in self.positions:
                    return 404, {"code": 40410000, "message": "position does not exist"}
                return 200, self._position(sym)
            return 404, {"code": 40410000, "message": f"no route {method} {path}"}

    def take_fault(self, route: str) -> Optional[Fault]:
        with self.lock:
            for f in self.faults:
                if f.route in (route, "*"):
                    f.times -= 1
                    if f.times <= 0:
                        self.faults.remove(f)
                    return f
        return None


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (killed, timed out) is part of the faults under test, not noise to print


def _asset_id(sym: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"asset:{sym}"))


class _Handler(BaseHTTPRequestHandler):
    broker: FakeAlpaca
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body go out in two writes: without this, Nagle's algorithm holds the body for the client's
        # delayed ACK (~40 ms a request), a latency no real broker has
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self, method: str) -> None:
        arrived = time.time()
        try:
            self._serve_one(method, arrived)
        finally:
            with self.broker.lock:
                self.broker.served.append((arrived, time.time()))

    def _serve_one(self, method: str, arrived: float) -> None:
        fake = self.broker
        fake.peers.add(self.client_address[0])
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        route = f"{method} {url.path}"
        with fake.lock:
            fake.requests.append((method, url.path))
        if self.headers.get("APCA-API-KEY-ID") != KEY or self.headers.get("APCA-API-SECRET-KEY") != SECRET:
            return self._send(401, {"code": 40110000, "message": "request is not authorized"})
        if fake.latency_s:
            time.sleep(fake.latency_s)
        if route == "POST /v2/orders":
            with fake.lock:
                cid = (body or {}).get("client_order_id", "")
                fake.posts[cid] = fake.posts.get(cid, 0) + 1
                fake.last_post_at = arrived
            if fake.on_post is not None:
                fake.on_post(cid)
        f = fake.take_fault(route)
        if f is not None and f.kind in ("429", "500", "503") and not (f.accept and f.kind != "429"):
            headers = {"Retry-After": f"{f.retry_after:g}"} if f.kind == "429" else {}
            return self._send(int(f.kind), {"code": int(f.kind) * 100000, "message": f"fault {f.kind}"}, headers)
        status, doc = fake.handle(method, url.path, q, body)
        if f is None:
            return self._send(status, doc)
        if f.kind == "drop":  # the broker did the work; the answer never arrives
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if f.kind == "timeout":
            time.sleep(f.delay_s)
            return self._send(status, doc)
        return self._send(int(f.kind), {"code": int(f.kind) * 100000, "message": f"fault {f.kind} after accept"})

    def _send(self, status: int, doc: Any, headers: Optional[dict[str, str]] = None) -> None:
        data = b"" if doc is None else json.dumps(doc).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


__all__ = ["FakeAlpaca", "Fault", "KEY", "SECRET"]
