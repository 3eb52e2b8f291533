"""A small StockBench `storage/` tree written from scratch, in StockBench's own file formats, for tests that need a
tree they can change or break (the shipped archive is read-only and slow to derive cold)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

DAYS = ("2024-03-01", "2024-03-04", "2024-03-05")


def write_bar(path: Path, day: str, o: float, h: float, low: float, c: float, v: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "date": pa.array([datetime.strptime(day, "%Y-%m-%d").date()], pa.date32()),
            "open": [o],
            "high": [h],
            "low": [low],
            "close": [c],
            "volume": [v],
            "vwap": [c],
        }
    )
    pq.write_table(table, path)


def write_tree(
    root: Path,
    symbol: str = "ACME",
    bar: Optional[dict] = None,
    news_text: Optional[str] = None,
    filings_text: Optional[str] = None,
) -> Path:
    """root/storage with three bars, two news files, two filings, a dividend and a split. `bar` overrides fields
    of the 2024-03-04 bar; `news_text` replaces the 2024-03-04 news file's text, `filings_text` the quarterly
    filings file's. Returns root."""
    storage = root / "storage"
    for i, day in enumerate(DAYS):
        values = {"o": 10.0 + i, "h": 11.0 + i, "low": 9.0 + i, "c": 10.5 + i, "v": 1000.0}
        if day == "2024-03-04" and bar:
            values.update(bar)
        write_bar(storage / "parquet" / symbol / "day" / f"{day}.parquet", day, **values)
    news = storage / "cache" / "news_by_day" / symbol
    news.mkdir(parents=True, exist_ok=True)
    epoch = int(datetime(2024, 3, 4, 15, 0, tzinfo=UTC).timestamp())
    finnhub = {
        "title": "ACME wins a contract",
        "description": "A fictional item.",
        "published_utc": "2024-03-04T23:00:00",
        "source": "Yahoo",
        "url": "https://example.invalid/1",
        "related_symbols": [symbol],
        "id": 1,
        "datetime": epoch,
    }
    (news / "2024-03-04.json").write_text(news_text if news_text is not None else json.dumps({"items": [finnhub]}))
    polygon = {
        "id": "abc",
        "publisher": {"name": "Wire"},
        "title": "ACME wins a contract",
        "published_utc": "2024-03-04T15:00:00Z",
        "article_url": "https://example.invalid/2",
        "tickers": [symbol],
        "description": "",
    }
    (news / "2024-03-05.json").write_text(json.dumps({"items": [polygon]}))
    fin = storage / "cache" / "financials"
    fin.mkdir(parents=True, exist_ok=True)
    quarter = {
        "start_date": "2023-10-01",
        "end_date": "2023-12-31",
        "filing_date": "2024-02-01",
        "acceptance_datetime": "2024-02-01T21:00:00Z",
        "fiscal_period": "Q4",
        "fiscal_year": "2023",
        "financials": {
            "income_statement": {
                "revenues": {"value": 100.0},
                "net_income_loss": {"value": 10.0},
                "diluted_earnings_per_share": {"value": 0.5},
            },
            "balance_sheet": {"equity": {"value": 500.0}},
        },
    }
    (fin / f"{symbol}.quarterly.json").write_text(filings_text if filings_text is not None else json.dumps([quarter]))
    (fin / f"{symbol}.annual.json").write_text("[]")
    ca = storage / "cache" / "corporate_actions"
    ca.mkdir(parents=True, exist_ok=True)
    (ca / f"{symbol}.dividends.json").write_text(
        json.dumps(
            [{"cash_amount": 0.25, "ex_dividend_date": "2024-03-05", "pay_date": "2024-03-20", "ticker": symbol}]
        )
    )
    (ca / f"{symbol}.splits.json").write_text("[]")
    return root
