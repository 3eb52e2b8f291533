"""Deterministic evidence: technical indicators, news features, forecast, FeatureBundle."""

from agent.features.bundle import build_bundle, ensure_bundle, fallback_bundle
from agent.features.forecast import price_forecast
from agent.features.news import news_features
from agent.features.technical import IndicatorCache, compute_indicator_frame

__all__ = [
    "build_bundle",
    "ensure_bundle",
    "fallback_bundle",
    "price_forecast",
    "news_features",
    "IndicatorCache",
    "compute_indicator_frame",
]
