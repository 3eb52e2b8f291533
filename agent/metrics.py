"""Backtest metrics: pure functions on an equity series (+ trades). No I/O, no pandas required.

Conventions: returns are simple period returns of the equity series; annualisation uses
`periods_per_year` (252 for daily decision points, 252/N when deciding every N trading days);
standard deviations are sample (ddof=1); Sortino's downside deviation is the root mean square
of the negative excess returns over *all* periods; drawdowns are fractions (0.25 = -25%).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

TRADING_DAYS = 252


def period_returns(equity: Sequence[float]) -> list[float]:
    return [equity[i] / equity[i - 1] - 1.0 for i in range(1, len(equity))]


def total_return(equity: Sequence[float]) -> float:
    return equity[-1] / equity[0] - 1.0 if len(equity) >= 2 else 0.0


def annualised_return(equity: Sequence[float], periods_per_year: float = TRADING_DAYS) -> float:
    n = len(equity) - 1
    if n <= 0:
        return 0.0
    growth = equity[-1] / equity[0]
    if growth <= 0:
        return -1.0
    return growth ** (periods_per_year / n) - 1.0


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _std(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def annualised_volatility(equity: Sequence[float], periods_per_year: float = TRADING_DAYS) -> float:
    return _std(period_returns(equity)) * math.sqrt(periods_per_year)


def sharpe_ratio(equity: Sequence[float], rf: float = 0.0, periods_per_year: float = TRADING_DAYS) -> Optional[float]:
    """(mean excess period return / sample std) * sqrt(periods/year); rf is an annual rate. None if std is 0."""
    rets = period_returns(equity)
    if len(rets) < 2:
        return None
    excess = [r - rf / periods_per_year for r in rets]
    sd = _std(excess)
    if sd < 1e-15:
        return None
    return _mean(excess) / sd * math.sqrt(periods_per_year)


def sortino_ratio(equity: Sequence[float], rf: float = 0.0, periods_per_year: float = TRADING_DAYS) -> Optional[float]:
    rets = period_returns(equity)
    if not rets:
        return None
    excess = [r - rf / periods_per_year for r in rets]
    downside = math.sqrt(sum(min(x, 0.0) ** 2 for x in excess) / len(excess))
    if downside < 1e-15:
        return None
    return _mean(excess) / downside * math.sqrt(periods_per_year)


def max_drawdown(equity: Sequence[float], dates: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Largest peak-to-trough fall as a fraction, with the peak's and the trough's dates (or indices)."""
    labels = list(dates) if dates is not None else list(range(len(equity)))
    best: dict[str, Any] = {
        "max_drawdown": 0.0,
        "peak": labels[0] if labels else None,
        "trough": labels[0] if labels else None,
    }
    if not equity:
        return best
    peak_i = 0
    for i, v in enumerate(equity):
        if v > equity[peak_i]:
            peak_i = i
        dd = 1.0 - v / equity[peak_i]
        if dd > best["max_drawdown"] + 1e-15:
            best = {"max_drawdown": dd, "peak": labels[peak_i], "trough": labels[i]}
    return best


def drawdown_series(equity: Sequence[float]) -> list[float]:
    out, peak = [], -math.inf
    for v in equity:
        peak = max(peak, v)
        out.append(1.0 - v / peak)
    return out


def calmar_ratio(equity: Sequence[float], periods_per_year: float = TRADING_DAYS) -> Optional[float]:
    dd = max_drawdown(equity)["max_drawdown"]
    if dd < 1e-15:
        return None
    return annualised_return(equity, periods_per_year) / dd


def _get(t: Any, k: str) -> Any:
    return t[k] if isinstance(t, Mapping) else getattr(t, k)


def closed_trades(trades: Iterable[Any]) -> list[float]:
    """P&L of every sell fill against the position's average cost (buy fees included in the cost)."""
    qty: dict[str, float] = {}
    cost: dict[str, float] = {}
    pnls: list[float] = []
    for t in trades:
        s, side, q, px, fee = _get(t, "symbol"), _get(t, "side"), _get(t, "quantity"), _get(t, "price"), _get(t, "fees")
        if side == "BUY":
            cost[s] = cost.get(s, 0.0) + q * px + fee
            qty[s] = qty.get(s, 0.0) + q
        else:
            held = qty.get(s, 0.0)
            avg = cost.get(s, 0.0) / held if held > 0 else px
            pnls.append((px - avg) * q - fee)
            qty[s] = held - q
            cost[s] = avg * qty[s] if qty[s] > 1e-12 else 0.0
    return pnls


def hit_rate(trades: Iterable[Any]) -> Optional[float]:
    pnls = closed_trades(trades)
    return sum(1 for p in pnls if p > 0) / len(pnls) if pnls else None


def turnover(trades: Iterable[Any], equity: Sequence[float]) -> float:
    """Traded notional (buys + sells) over the average equity of the period."""
    notional = sum(_get(t, "notional") for t in trades)
    return notional / _mean(equity) if equity else 0.0


def summarize(
    dates: Sequence[str],
    equity: Sequence[float],
    *,
    trades: Sequence[Any] = (),
    exposure: Optional[Sequence[float]] = None,
    rf: float = 0.0,
    periods_per_year: float = TRADING_DAYS,
) -> dict[str, Any]:
    """Every metric of one equity curve. `exposure` is the invested fraction at each point."""
    dd = max_drawdown(equity, dates)
    trades = list(trades)
    return {
        "start": dates[0] if dates else None,
        "end": dates[-1] if dates else None,
        "start_equity": equity[0] if equity else None,
        "final_equity": equity[-1] if equity else None,
        "total_return": total_return(equity),
        "annualised_return": annualised_return(equity, periods_per_year),
        "annualised_volatility": annualised_volatility(equity, periods_per_year),
        "sharpe": sharpe_ratio(equity, rf, periods_per_year),
        "sortino": sortino_ratio(equity, rf, periods_per_year),
        "max_drawdown": dd["max_drawdown"],
        "max_drawdown_peak": dd["peak"],
        "max_drawdown_trough": dd["trough"],
        "calmar": calmar_ratio(equity, periods_per_year),
        "hit_rate": hit_rate(trades),
        "closed_trades": len(closed_trades(trades)),
        "turnover": turnover(trades, equity),
        "num_trades": len(trades),
        "average_exposure": _mean(exposure) if exposure else 0.0,
    }


def buy_and_hold_curve(closes: Mapping[str, Sequence[float]], initial_cash: float) -> list[float]:
    """Equal-weight buy-and-hold: initial_cash split equally at the first close, fractional, no costs."""
    symbols = list(closes)
    n = len(next(iter(closes.values()))) if symbols else 0
    shares = {s: initial_cash / len(symbols) / closes[s][0] for s in symbols}
    return [sum(shares[s] * closes[s][i] for s in symbols) for i in range(n)]


# ---------------------------------------------------------------- StockBench's definitions
# StockBench (arXiv 2510.02209; github.com/ChenYXxxx/stockbench, stockbench/backtest/metrics.py) scores a run on its
# NAV, the equity divided by the starting cash, one point per session. Its Sortino is daily and not annualised, its
# downside is the sample standard deviation of the negative days only, and the first day's return (0) counts in the
# mean: the scorecard must compute exactly that to sit beside the published rows.


def nav_returns(equity: Sequence[float]) -> list[float]:
    """Daily returns as StockBench takes them (pandas pct_change().fillna(0)): the first day's return is 0."""
    return [0.0] + period_returns(equity) if equity else []


def stockbench_metrics(equity: Sequence[float], initial_cash: Optional[float] = None) -> dict[str, Optional[float]]:
    """cumulative_return, max_drawdown (a negative fraction), sortino (daily), sharpe (annualised) of an equity curve
    as StockBench computes them. `initial_cash` is the NAV's base: a run's return is against the cash it started
    with (its `evaluate`); None takes the first point (its buy-and-hold baseline's `extract_key_metrics_summary`)."""
    if not equity:
        return {"cumulative_return": None, "max_drawdown": None, "sortino": None, "sharpe": None}
    base = initial_cash if initial_cash is not None else equity[0]
    rets = nav_returns(equity)
    peak, mdd = -math.inf, 0.0
    for v in equity:  # the running peak starts at the first point, not at the starting cash
        peak = max(peak, v)
        mdd = min(mdd, v / peak - 1.0)
    negative = [r for r in rets if r < 0]
    downside = _std(negative) if len(negative) > 1 else 0.0
    vol = _std(rets)
    return {
        "cumulative_return": equity[-1] / base - 1.0,
        "max_drawdown": mdd,
        "sortino": _mean(rets) / downside if downside > 0 else 0.0,
        "sharpe": _mean(rets) * TRADING_DAYS / (vol * math.sqrt(TRADING_DAYS)) if vol > 0 else 0.0,
    }


def equal_weight_buy_and_hold(
    prices: Mapping[str, Sequence[float]], initial_cash: float, entry_cost_bps: float = 0.0
) -> list[float]:
    """StockBench's passive baseline: the cash split equally across the symbols, each bought once at the first
    price with `entry_cost_bps` charged on the way in (its commission + slippage), fractional shares, never
    rebalanced, no dividends; the equity at each later price."""
    symbols = list(prices)
    if not symbols:
        return []
    n = len(prices[symbols[0]])
    per = initial_cash / len(symbols) / (1.0 + entry_cost_bps / 1e4)
    shares = {s: per / prices[s][0] for s in symbols}
    return [sum(shares[s] * prices[s][i] for s in symbols) for i in range(n)]
