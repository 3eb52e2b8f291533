"""The latest headlines Yahoo Finance lists for a symbol, through yfinance (the `data` extra), written as a news file
in the format `--news FILE` reads (agent/data/news.py): one JSON line per headline with the time Yahoo says it was
published (`pubDate`, UTC), never the time it was fetched, so a cycle sees only what was out before its decision.

yfinance 1.x asks Yahoo's news stream with `Ticker.get_news` (a POST to finance.yahoo.com/xhr/ncp). The same request
is sent here through yfinance's own session (its cookie and crumb), and its answer checked: get_news reads an error
answer that is JSON (a 500 with a body, a changed shape) as no news at all, which would be a silent fallback. Only
the `tradegraph live` loop calls this, at its run time; no cycle, backtest or replay does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agent.data.market import DataError
from agent.data.yahoo import FetchFailed, _line, _quietly_raising, _yfinance

NEWS_COUNT = 20  # headlines asked per symbol: Yahoo's stream gives the latest, newest first
NEWS_URL = "https://finance.yahoo.com/xhr/ncp?queryRef=latestNews&serviceKey=ncp_fin"  # yfinance's get_news(tab="news")


def fetch_yfinance_news(symbols: list[str], count: int = NEWS_COUNT) -> tuple[list[dict[str, Any]], list[str]]:
    """Each symbol's latest headlines as news-file rows, and one note per symbol whose items were left out (no
    publication time or no title: a headline that cannot be placed in time is not shown to a cycle). FetchFailed,
    one line naming the symbol, when Yahoo's answer is not a news stream."""
    yf = _yfinance()
    from yfinance.data import YfData

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with _quietly_raising(yf):
        data = YfData()
        for symbol in symbols:
            body = {"serviceConfig": {"snippetCount": count, "s": [symbol]}}
            try:
                answer = data.post(NEWS_URL, body=body)
            except Exception as e:  # noqa: BLE001 - whatever the network or Yahoo did, one line naming the symbol
                raise FetchFailed(
                    f"yfinance: fetching news of {symbol} failed: {type(e).__name__}: {_line(e)}"
                ) from None
            status = getattr(answer, "status_code", None)
            try:
                stream = answer.json()["data"]["tickerStream"]["stream"]
                if status != 200 or not isinstance(stream, list):
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise FetchFailed(
                    f"yfinance: fetching news of {symbol} failed: HTTP {status}, not a news stream"
                ) from None
            kept, dropped = _as_news_rows(symbol, [a for a in stream if isinstance(a, dict) and not a.get("ad")])
            rows += kept
            if dropped:
                notes.append(f"{symbol}: left out {dropped} headline(s) without a publication time or a title")
    return rows, notes


def _as_news_rows(symbol: str, stream: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    out, dropped = [], 0
    for article in stream:
        content = article.get("content")
        c: dict[str, Any] = content if isinstance(content, dict) else {}
        published, title = c.get("pubDate"), c.get("title")
        if not isinstance(published, str) or not published or not isinstance(title, str) or not title.strip():
            dropped += 1
            continue
        given = c.get("provider")
        provider: dict[str, Any] = given if isinstance(given, dict) else {}
        link = next(
            (u.get("url") for u in (c.get("canonicalUrl"), c.get("clickThroughUrl")) if isinstance(u, dict)), None
        )
        finance = c.get("finance")
        tickers = (finance.get("stockTickers") or []) if isinstance(finance, dict) else []
        row = {
            "symbol": symbol.upper(),
            "published_at": published,
            "headline": title.strip(),
            "source": str(provider.get("displayName") or "Yahoo Finance"),
            "summary": c.get("summary") or None,
            "url": link,
            "id": str(c.get("id") or article.get("id") or "") or None,
            "related_symbols": [str(t["symbol"]) for t in tickers if isinstance(t, dict) and t.get("symbol")] or None,
        }
        out.append({k: v for k, v in row.items() if v is not None})
    return out, dropped


def write_news(rows: list[dict[str, Any]], out: str | Path) -> int:
    """Write atomically and read back with the `--news` reader, so what was written is a valid news file. Returns
    the number of headlines."""
    from agent.data.news import load_news

    p = Path(out)
    tmp = p.with_name(f".part-{p.name}")
    try:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    except OSError as e:
        raise DataError(f"{p}: cannot write: {e.strerror or e}") from None
    try:
        load_news(tmp)
    except DataError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, p)
    return len(rows)
