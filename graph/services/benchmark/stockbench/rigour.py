"""What a quant asks of a StockBench row besides its three figures (issue 31): is its edge over buy-and-hold more
than noise (a paired test of daily excess returns: mean, 95% bootstrap interval, two-sided p-value; FINSABER,
arXiv 2505.07078, found LLM strategies' edge failing such tests), how it did in the window's downturn (March-April)
and upturn (May-June), as the paper discusses, how much its runs vary (mean and standard deviation over --runs), and
whether its model may have seen the window (a training cut-off on or after the window's start: cutoffs.json)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from agent.metrics import stockbench_metrics

BOOTSTRAP = 10_000
SEED = 7  # the same NAVs give the same interval and p-value
# the fewest paired sessions a bootstrap interval and p-value are given for: resampling a handful of days gives a few
# distinct means, and a p of 0 from two sessions would read as significance (about a trading month)
MIN_SESSIONS = 20
SUB_PERIODS = {"downturn (Mar-Apr)": ("03", "04"), "upturn (May-Jun)": ("05", "06")}
CUTOFFS = Path(__file__).with_name("cutoffs.json")
UNVERIFIED = "unverified"  # how a cut-off row whose source cannot be named begins its source
METRICS = ("cumulative_return", "max_drawdown", "sortino")


def daily_returns(nav: Sequence[dict[str, Any]], base: Optional[float] = None) -> list[float]:
    """Each session's return; the first against `base` (the cash a run starts with) when given."""
    values = ([base] if base is not None else []) + [float(p["equity"]) for p in nav]
    return [b / a - 1.0 for a, b in zip(values, values[1:])]


def paired_test(
    run_nav: Sequence[dict[str, Any]],
    bh_nav: Sequence[dict[str, Any]],
    initial_cash: float,
    resamples: int = BOOTSTRAP,
    seed: int = SEED,
) -> dict[str, Any]:
    """Daily excess returns of a run over buy-and-hold on the same dates (both from the cash they start with):
    their mean, its 95% percentile-bootstrap interval, and the two-sided bootstrap p-value of a zero mean (the
    resampled means, centred, as far from zero as the observed one)."""
    import numpy as np

    by_date = {p["date"]: p for p in bh_nav}
    dates = [p["date"] for p in run_nav if p["date"] in by_date]
    run = daily_returns([p for p in run_nav if p["date"] in by_date], initial_cash)
    bh = daily_returns([by_date[d] for d in dates], initial_cash)
    excess = np.array(run) - np.array(bh)
    n = len(excess)
    if n < MIN_SESSIONS:
        return {
            "sessions": n,
            "mean": float(excess.mean()) if n else None,
            "ci95": None,
            "p_value": None,
            "method": f"no test: {n} paired session(s), fewer than the {MIN_SESSIONS} a bootstrap needs here",
        }
    rng = np.random.default_rng(seed)
    means = excess[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    mean = float(excess.mean())
    p = float(np.mean(np.abs(means - mean) >= abs(mean))) if mean != 0 else 1.0
    return {
        "sessions": n,
        "mean": mean,
        "ci95": [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))],
        "p_value": p,
        "method": f"paired daily excess returns over buy-and-hold; {resamples} bootstrap resamples, seed {seed}",
    }


def sub_periods(nav: Sequence[dict[str, Any]], initial_cash: float) -> dict[str, Optional[dict[str, Any]]]:
    """The three metrics on each sub-period's sessions, each from the equity the period started with (the last
    NAV before it, or the starting cash): None for a period the window does not reach."""
    out: dict[str, Optional[dict[str, Any]]] = {}
    for name, months in SUB_PERIODS.items():
        inside = [i for i, p in enumerate(nav) if p["date"][5:7] in months]
        if not inside:
            out[name] = None
            continue
        base = float(nav[inside[0] - 1]["equity"]) if inside[0] > 0 else initial_cash
        equity = [float(nav[i]["equity"]) for i in inside]
        figures = stockbench_metrics([base, *equity], base)
        out[name] = {
            "start": nav[inside[0]]["date"],
            "end": nav[inside[-1]]["date"],
            "sessions": len(inside),
            **{k: figures[k] for k in METRICS},
        }
    return out


def spread(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample standard deviation of each metric over a configuration's runs (std None for one run)."""
    out: dict[str, Any] = {"runs": len(rows)}
    for k in METRICS:
        values = [r[k] for r in rows if r.get(k) is not None]
        out[k] = statistics.fmean(values) if values else None
        out[f"{k}_std"] = statistics.stdev(values) if len(values) > 1 else None
    return out


def cutoff_of(model: str) -> dict[str, Any]:
    table = json.loads(CUTOFFS.read_text())["models"]
    name = (
        model.split(":", 1)[1]
        if ":" in model and model.split(":", 1)[0] in ("openai", "anthropic", "google_genai", "ollama", "offline")
        else model
    )
    found = table.get(name)
    return {
        "model": model,
        "cutoff": found["cutoff"] if found else None,
        "source": found["source"] if found else None,
        "known": found is not None,
        "verified": found is not None and not found["source"].startswith(UNVERIFIED),
    }


def may_have_seen(models: Sequence[str], window_start: str) -> dict[str, Any]:
    """True when any tier's model was trained on data from on or after the window's start (month precision), None
    when a model's cut-off is unknown, False when every one ends before it (or it reads no training data)."""
    cutoffs = [cutoff_of(m) for m in dict.fromkeys(models)]
    flags: list[Optional[bool]] = []
    for c in cutoffs:
        if not c["known"]:
            flags.append(None)
        else:
            flags.append(c["cutoff"] is not None and c["cutoff"] >= window_start[:7])
    seen = True if True in flags else (None if None in flags else False)
    return {"may_have_seen_window": seen, "cutoffs": cutoffs}


def recomputed(row: dict[str, Any], initial_cash: float) -> dict[str, Optional[float]]:
    """The metrics a row's own NAV gives, from the cash it starts with: what every row's figures must equal."""
    figures = stockbench_metrics([float(p["equity"]) for p in row["nav"]], initial_cash)
    return {k: figures[k] for k in METRICS}


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
