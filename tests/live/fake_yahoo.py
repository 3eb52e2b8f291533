"""A fake Yahoo Finance on 127.0.0.1 (an OS-chosen port) that yfinance itself talks to over real sockets: the cookie
and crumb requests, the timezone lookup and the v8 chart, in the shapes tests/fixtures/yfinance_acme_2024-01.json
records, and the news stream yfinance's Ticker.get_news asks (POST finance.yahoo.com/xhr/ncp, answered in the
shape yfinance 1.x reads: data.tickerStream.stream, each item's content with pubDate, title, provider…; `news`
holds each symbol's items, none by default, `news_failing` a status for every news request while set). Its bars are the bundled sample's (agent/data/stocks.csv.gz), cut at `through` (a symbol's last bar), so a
cycle fed from it decides as one fed the sample would.

yfinance calls Yahoo's https hosts; `redirect_session(port)` is a requests Session whose transport sends each
request to this server instead (the host kept as the path's first part), and `install(port)` makes it yfinance's
session (the seam tests/unit/test_own_data_fetch.py uses). Faults are real answers on the wire: `answer` queues a
status (429 with Retry-After, 500) for the next chart requests, `failing` one for all of them, `stop()` closes the port (connection refused)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qsl, urlsplit

import pandas as pd
import requests
from requests.adapters import HTTPAdapter

NY = "America/New_York"


def _bundled() -> pd.DataFrame:
    from agent.data.sources import KINDS

    raw = pd.read_csv(KINDS["prices"].bundled)
    return raw.rename(
        columns={
            "Ticker": "symbol",
            "Date": "date",
            "Open": "open",
            "High": "high",
            "Low": "low",
            "Close": "close",
            "Volume": "volume",
            "Adj Close": "adj_close",
        }
    )


class FakeYahoo:
    def __init__(self, through: Optional[dict[str, str]] = None, port: int = 0) -> None:
        self.bars = _bundled()
        self.through: dict[str, str] = dict(through or {})  # symbol -> its last bar served
        self.answer: list[int] = []  # statuses for the next chart requests, one each
        self.failing: Optional[int] = None  # the status of every chart request while set
        self.charts: list[tuple[str, dict[str, str]]] = []  # chart requests answered with bars (symbol, params)
        self.news: dict[str, list[dict[str, Any]]] = {}  # symbol -> its stream's items (news_article), newest first
        self.news_failing: Optional[int] = None  # the status of every news request while set (with a JSON body)
        self.news_asked: list[tuple[str, int]] = []  # (symbol, snippetCount) of each news request
        self.asked: list[str] = []
        self.peers: set[str] = set()
        self.port = port
        self._server: Optional[ThreadingHTTPServer] = None

    def start(self) -> FakeYahoo:
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ answers
    def chart(self, symbol: str, params: dict[str, str]) -> tuple[int, Any]:
        rows = self.bars[self.bars.symbol == symbol]
        if rows.empty:
            return 404, {
                "chart": {
                    "result": None,
                    "error": {"code": "Not Found", "description": "No data found, symbol may be delisted"},
                }
            }
        if symbol in self.through:
            rows = rows[rows.date <= self.through[symbol]]
        if "period1" in params:
            lo = datetime.fromtimestamp(int(params["period1"]), UTC)
            hi = datetime.fromtimestamp(int(params["period2"]), UTC)
            opens = [_open(d) for d in rows.date]
            keep = [lo <= t < hi for t in opens]
            rows = rows[keep]
            self.charts.append((symbol, params))
        else:  # range=1d: the timezone lookup, the last session only
            rows = rows.tail(1)
        stamps = [int(_open(d).timestamp()) for d in rows.date]
        adj = rows["adj_close"] if "adj_close" in rows else rows["close"]
        meta = {
            "currency": "USD",
            "symbol": symbol,
            "exchangeName": "NMS",
            "fullExchangeName": "NasdaqGS",
            "instrumentType": "EQUITY",
            "firstTradeDate": 345479400,
            "gmtoffset": -14400,
            "timezone": "EDT",
            "exchangeTimezoneName": NY,
            "priceHint": 2,
            "dataGranularity": "1d",
            "range": params.get("range", ""),
            "validRanges": ["1d", "5d", "1mo", "max"],
        }
        return 200, {
            "chart": {
                "result": [
                    {
                        "meta": meta,
                        "timestamp": stamps,
                        "indicators": {
                            "quote": [
                                {k: rows[k].astype(float).tolist() for k in ("open", "high", "low", "close")}
                                | {"volume": rows["volume"].astype(float).tolist()}
                            ],
                            "adjclose": [{"adjclose": adj.astype(float).tolist()}],
                        },
                    }
                ],
                "error": None,
            }
        }


def news_article(uid: str, title: str, published: str, symbol: str, provider: str = "Reuters") -> dict[str, Any]:
    """One item of Yahoo's news stream as yfinance 1.x gets it; `published` is its pubDate (ISO, UTC)."""
    url = f"https://finance.yahoo.com/news/{uid}.html"
    return {
        "id": uid,
        "content": {
            "id": uid,
            "contentType": "STORY",
            "title": title,
            "description": "",
            "summary": f"{title}, the summary.",
            "pubDate": published,
            "displayTime": published,
            "isHosted": True,
            "provider": {"displayName": provider, "url": "https://example.invalid/"},
            "canonicalUrl": {"url": url, "site": "finance", "region": "US", "lang": "en-US"},
            "clickThroughUrl": {"url": url, "site": "finance", "region": "US", "lang": "en-US"},
            "finance": {"stockTickers": [{"symbol": symbol}]},
        },
    }


def _open(day: str) -> datetime:
    """A daily bar's timestamp as Yahoo gives it: the session's 09:30 open, New York time."""
    return pd.Timestamp(f"{day} 09:30").tz_localize(NY).tz_convert("UTC").to_pydatetime()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeYahoo

    def log_message(self, *a: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        fake = self.fake
        fake.peers.add(self.client_address[0])
        parts = urlsplit(self.path)
        host, _, path = parts.path.lstrip("/").partition("/")
        params = {k: v for k, v in parse_qsl(parts.query) if k != "crumb"}
        fake.asked.append(f"{host}/{path}")
        if host == "fc.yahoo.com" or host == "guce.yahoo.com":
            return self._send(404, "<html><body>404</body></html>", "text/html")
        if path == "v1/test/getcrumb":
            return self._send(200, "Xk2mP7qLaBw", "text/plain;charset=utf-8")
        if path.startswith("v8/finance/chart/"):
            status = fake.answer.pop(0) if fake.answer else fake.failing
            if status is not None:
                extra = {"Retry-After": "30"} if status == 429 else {}
                return self._send(
                    status, "Too Many Requests\r\n" if status == 429 else "Internal Server Error", "text/plain", extra
                )
            status, body = fake.chart(path.rsplit("/", 1)[1], params)
            return self._send(status, json.dumps(body), "application/json")
        return self._send(404, json.dumps({"error": "not faked"}), "application/json")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        fake = self.fake
        fake.peers.add(self.client_address[0])
        parts = urlsplit(self.path)
        host, _, path = parts.path.lstrip("/").partition("/")
        fake.asked.append(f"POST {host}/{path}")
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if host != "finance.yahoo.com" or path != "xhr/ncp":
            return self._send(404, json.dumps({"error": "not faked"}), "application/json")
        config = body.get("serviceConfig") or {}
        symbol, count = (config.get("s") or [""])[0], int(config.get("snippetCount") or 10)
        fake.news_asked.append((symbol, count))
        if fake.news_failing is not None:
            return self._send(fake.news_failing, json.dumps({"error": "fault"}), "application/json")
        stream = fake.news.get(symbol, [])[:count]
        doc = {"data": {"tickerStream": {"stream": stream, "pagination": {"uuids": ""}}}, "status": "OK"}
        return self._send(200, json.dumps(doc), "application/json")

    def _send(self, status: int, body: str, ctype: str, headers: Optional[dict[str, str]] = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


class _Redirect(HTTPAdapter):
    def __init__(self, port: int) -> None:
        super().__init__(max_retries=0)
        self.port = port

    def send(self, request, **kwargs):  # type: ignore[no-untyped-def,override]
        parts = urlsplit(request.url)
        request.url = f"http://127.0.0.1:{self.port}/{parts.netloc}{parts.path or '/'}" + (
            f"?{parts.query}" if parts.query else ""
        )
        return super().send(request, **kwargs)


def redirect_session(port: int) -> requests.Session:
    session = requests.Session()
    session.mount("https://", _Redirect(port))
    session.mount("http://", _Redirect(port))
    return session


def install(port: int, cache_dir: str) -> None:
    """yfinance, in this process, talks to the fake on `port`, its caches in `cache_dir`."""
    import yfinance
    import yfinance.data

    yfinance.data.SingletonMeta._instances = {}
    # yfinance keeps in memory the answers for ranges that ended 30 days ago or more: every range a test's 2012
    # clock asks for. Asked again (a retry), it would answer from memory and never reach the fake: off.
    yfinance.data.YfData.cache_get = yfinance.data.YfData.get  # type: ignore[method-assign]
    yfinance.data.new_session = lambda: redirect_session(port)  # type: ignore[attr-defined]
    yfinance.set_tz_cache_location(cache_dir)
