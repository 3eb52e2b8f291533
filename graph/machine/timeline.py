"""A session moves forward in time: its next cycle decides on or after the date its last one decided.

A cycle's book is the session's book as its last cycle left it: positions opened, levels checked and dividends
credited through that cycle's date. Deciding an earlier date with it would price a later position at earlier bars
(no stop triggers on bars it already passed) and recall notes the earlier date could not know: look-ahead by the
book. The same date again is allowed (a backtest resumed at a cut-off point decides that date again).
"""

from __future__ import annotations

from typing import Any, Optional

from graph.machine.errors import InputError
from schemas.events import ManifestEvent, parse_event
from schemas.portfolio import PortfolioSnapshot


def book_dates(book: PortfolioSnapshot | dict[str, Any] | None) -> list[tuple[str, Optional[str], str]]:
    """(date, symbol or None, what) of each date a book carries: its own as-of and each position's opening, last checked bar and
    dividends credited. The audit reads a recorded book (a dict) by the same rule."""
    if book is None:
        return []
    data = book.model_dump(mode="json") if isinstance(book, PortfolioSnapshot) else book
    out: list[tuple[str, Optional[str], str]] = (
        [(str(data["as_of"]), None, "the book's as-of")] if data.get("as_of") else []
    )
    for symbol, pos in (data.get("positions") or {}).items():
        for key, what in (
            ("opened", "opened"),
            ("checked_through", "levels checked through"),
            ("dividends_through", "dividends credited through"),
        ):
            if isinstance(pos, dict) and pos.get(key):
                out.append((str(pos[key]), symbol, f"{symbol} {what}"))
    return out


def last_decided(store: Any, session_id: str, book: Optional[PortfolioSnapshot]) -> Optional[tuple[str, str]]:
    """(date, where it comes from) of the latest date the session has decided or its book carries, or None."""
    found = []
    for cycle_id in reversed(store.events.cycle_ids(session_id)):  # the last cycle that recorded its manifest
        manifests = store.events.read(session_id, kind="manifest", cycle_id=cycle_id)
        manifest = parse_event(manifests[-1]) if manifests else None  # one that is no manifest is named, refused
        as_of = (manifest.payload.inputs or {}).get("as_of") if isinstance(manifest, ManifestEvent) else None
        if as_of:
            found.append((str(as_of), f"cycle {cycle_id} decided"))
            break
    found += [(date, what) for date, _, what in book_dates(book)]
    return max(found, key=lambda f: f[0]) if found else None  # a tie names the cycle (listed first)


def refuse_going_back(store: Any, session_id: str, as_of: str, book: Optional[PortfolioSnapshot]) -> None:
    """InputError naming both dates when `as_of` is before the session's last decision (or its book's date)."""
    last = last_decided(store, session_id, book)
    if last is not None and as_of < last[0]:
        raise InputError(
            f"as_of {as_of} is before {last[0]}, when session '{session_id}' last decided ({last[1]}): "
            f"a session's next cycle decides on or after its last one; start a new session (no "
            f"--session) to decide {as_of}"
        )
