"""Code owns the prices: ATR-anchored entry/stop/target, then a validator that fails closed."""

from __future__ import annotations

from schemas.decision import TradeThesis

STOP_ATR = 2.0
TARGET_R = 2.0
MAX_STOP_ATR = 4.0
PRICE_DECIMALS = 2


class ThesisError(ValueError):
    """The thesis geometry is wrong; DECIDING fails closed on it."""


def anchored_levels(direction: str, price: float, atr: float | None) -> dict[str, float] | None:
    """entry = price, stop = 2×ATR on the correct side, target = 2R; None when ATR is missing or sub-tick."""
    if atr is None:
        return None
    sign = 1 if direction == "LONG" else -1
    entry = round(price, PRICE_DECIMALS)
    stop = round(entry - sign * STOP_ATR * atr, PRICE_DECIMALS)
    if stop == entry or stop <= 0:
        return None
    target = round(entry + sign * TARGET_R * abs(entry - stop), PRICE_DECIMALS)
    return {"entry": entry, "stop": stop, "target": target}


def anchor_prices(thesis: TradeThesis, price: float, atr: float | None) -> TradeThesis:
    """The anchored levels (anchored_levels) in place of the model's; sub-tick ATR keeps the model's prices."""
    levels = anchored_levels(thesis.direction, price, atr)
    if levels is None:
        return thesis.model_copy(update={"atr14": atr})
    return thesis.model_copy(update={**levels, "price_source": "atr_anchor", "atr14": atr})


def validate_thesis(thesis: TradeThesis) -> None:
    if thesis.stop == thesis.entry:
        raise ThesisError(f"{thesis.symbol}: stop {thesis.stop} equals entry")
    long = thesis.direction == "LONG"
    if (thesis.target <= thesis.entry) if long else (thesis.target >= thesis.entry):
        raise ThesisError(
            f"{thesis.symbol}: target {thesis.target} is on the wrong side of entry {thesis.entry} "
            f"for {thesis.direction}"
        )
    if (thesis.stop >= thesis.entry) if long else (thesis.stop <= thesis.entry):
        raise ThesisError(
            f"{thesis.symbol}: stop {thesis.stop} is on the wrong side of entry {thesis.entry} for {thesis.direction}"
        )
    if thesis.atr14 is not None and abs(thesis.entry - thesis.stop) > MAX_STOP_ATR * thesis.atr14 + 1e-9:
        raise ThesisError(
            f"{thesis.symbol}: stop {thesis.stop} is more than {MAX_STOP_ATR:g}×ATR "
            f"({thesis.atr14}) from entry {thesis.entry}"
        )
