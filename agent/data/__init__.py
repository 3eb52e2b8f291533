"""Point-in-time market, news, fundamentals and corporate-actions sources (pure, offline)."""

from agent.data.fundamentals import FundamentalsSource, default_fundamentals, load_fundamentals
from agent.data.market import (
    DataError,
    DateOutOfRangeError,
    MarketData,
    UnknownSymbolError,
    default_market_data,
    load_market_data,
    validate_as_of,
)
from agent.data.news import NewsSource, default_news, load_news
from agent.data.sources import DataFiles, load_file, load_sources, stockbench_files

__all__ = [
    "DataError",
    "DateOutOfRangeError",
    "UnknownSymbolError",
    "MarketData",
    "default_market_data",
    "load_market_data",
    "validate_as_of",
    "NewsSource",
    "default_news",
    "load_news",
    "FundamentalsSource",
    "default_fundamentals",
    "load_fundamentals",
    "DataFiles",
    "load_file",
    "load_sources",
    "stockbench_files",
]
