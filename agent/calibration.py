"""Conviction calibration: code, not the model, discounts a verdict the panel disagrees with."""

from __future__ import annotations

from schemas.analysis import AnalystNote

MAX_HAIRCUT = 0.60
ABSTAIN_MODEL = "deterministic-abstain"
NEUTRAL_BAND = 0.05


def takes_side(note: AnalystNote) -> bool:
    return note.model_used != ABSTAIN_MODEL and abs(note.stance) > NEUTRAL_BAND


def opposition_share(notes: list[AnalystNote], winner: str) -> float:
    """Share of side-taking analysts opposing the winner; abstaining and neutral notes don't dilute it."""
    taking = [n for n in notes if takes_side(n)]
    if not taking:
        return 0.0
    opposed = [n for n in taking if (n.stance < 0) == (winner == "LONG")]
    return len(opposed) / len(taking)


def calibrate(raw_conviction: float, notes: list[AnalystNote], winner: str) -> tuple[float, float]:
    """Returns (calibrated conviction, opposition share): a haircut of up to 60% at full opposition."""
    share = opposition_share(notes, winner)
    return round(raw_conviction * (1 - MAX_HAIRCUT * share), 4), share
