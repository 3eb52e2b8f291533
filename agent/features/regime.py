"""Regime words: a few discrete labels for a technical setup (trend, momentum, volatility).

They tag what a position was opened in and what a cycle looks at now, so that a lesson learned in one
setup is recalled (by shared words) when a similar setup comes back. Thresholds are the usual ones.
"""

from __future__ import annotations

from schemas.features import TechnicalFeatures


def regime_words(t: TechnicalFeatures) -> list[str]:
    words = []
    if t.sma50 is not None and t.sma200 is not None:
        words.append("uptrend" if t.sma50 > t.sma200 else "downtrend")
    if t.sma50 is not None:
        words.append("above_sma50" if t.close > t.sma50 else "below_sma50")
    if t.rsi14 is not None:
        words.append("rsi_overbought" if t.rsi14 > 70 else "rsi_oversold" if t.rsi14 < 30 else "rsi_neutral")
    if t.macd_hist is not None:
        words.append("macd_positive" if t.macd_hist > 0 else "macd_negative")
    if t.atr14 is not None and t.close:
        pct = t.atr14 / t.close * 100
        words.append("high_volatility" if pct > 3 else "low_volatility" if pct < 1.5 else "normal_volatility")
    if t.bb_upper is not None and t.close > t.bb_upper:
        words.append("above_upper_band")
    elif t.bb_lower is not None and t.close < t.bb_lower:
        words.append("below_lower_band")
    return words
