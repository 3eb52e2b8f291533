"""Equity and drawdown as inline SVG, drawn on the server: no script, no chart library, and it prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 640, 200, 64, 12, 12, 28
COLOURS = ("#1f6feb", "#8a8f98", "#c2410c", "#15803d", "#7c3aed", "#b91c1c")


@dataclass
class Series:
    name: str
    dates: list[str]
    values: list[float]


def drawdown(values: Sequence[float]) -> list[float]:
    """Each point's fall from the highest value before it, as a fraction (0 at a new high, negative below)."""
    out, peak = [], float("-inf")
    for v in values:
        peak = max(peak, v)
        out.append(v / peak - 1.0 if peak > 0 else 0.0)
    return out


def line_chart(title: str, series: list[Series], *, percent: bool = False) -> str:
    """An SVG with one polyline per series over a shared date axis, its min and max labelled, and a legend; a
    `<title>` names it for screen readers. Empty series draw a note instead of an empty frame."""
    series = [s for s in series if s.values]
    if not series:
        return f'<p class="muted">{escape(title)}: no points yet</p>'
    lo = min(min(s.values) for s in series)
    hi = max(max(s.values) for s in series)
    if hi == lo:
        hi, lo = hi + (abs(hi) * 0.01 or 1.0), lo - (abs(lo) * 0.01 or 1.0)
    n = max(len(s.values) for s in series)
    x = lambda i: PAD_L + (W - PAD_L - PAD_R) * (i / (n - 1) if n > 1 else 0.5)  # noqa: E731
    y = lambda v: PAD_T + (H - PAD_T - PAD_B) * (hi - v) / (hi - lo)  # noqa: E731
    label = (lambda v: f"{v:.2%}") if percent else (lambda v: f"{v:,.0f}")
    parts = [
        f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_T - PAD_B}" '
        f'fill="none" stroke="#d0d7de"/>',
        f'<text x="{PAD_L - 4}" y="{PAD_T + 10}" text-anchor="end" class="axis">{escape(label(hi))}</text>',
        f'<text x="{PAD_L - 4}" y="{H - PAD_B}" text-anchor="end" class="axis">{escape(label(lo))}</text>',
    ]
    dates = max(series, key=lambda s: len(s.dates)).dates
    if dates:
        parts.append(f'<text x="{PAD_L}" y="{H - 8}" class="axis">{escape(dates[0])}</text>')
        parts.append(f'<text x="{W - PAD_R}" y="{H - 8}" text-anchor="end" class="axis">{escape(dates[-1])}</text>')
    for k, s in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s.values))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{points}">'
            f"<title>{escape(s.name)}</title></polyline>"
        )
        parts.append(
            f'<text x="{PAD_L + 6}" y="{PAD_T + 14 + 13 * k}" fill="{colour}" class="legend">{escape(s.name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def equity_and_drawdown(series: list[Series]) -> tuple[str, str]:
    """The equity chart and, below it, each series' drawdown."""
    dd = [Series(s.name, s.dates, drawdown(s.values)) for s in series]
    return line_chart("Equity", series), line_chart("Drawdown", dd, percent=True)
