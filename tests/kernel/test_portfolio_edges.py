"""`portfolio` for the sessions that have no stored book or no price file any more: one paused for approval or
rejected shows its cash; an own-data session whose price file moved is valued on the prices it recorded. A session
that decided at the close is valued on the closes it recorded (its price file unread: pandas stays unloaded); one
that decided at the open recorded opening prices, so its price file's close values it."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from graph.kernel import errors as E
from graph.kernel.core import Kernel

ACME = Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme.csv"


@pytest.fixture
def kernel():
    k = Kernel.open(f"mongomock://pe_{uuid.uuid4().hex[:10]}")
    try:
        yield k
    finally:
        k.close()


def _cash_only(view, as_of: str) -> None:
    assert (view.as_of, view.version, view.fills, view.positions) == (as_of, 0, 0, [])
    assert view.cash == view.starting_cash == view.equity == 100_000.0
    assert view.realized_pnl == view.unrealized_pnl == view.total_pnl == view.fees_paid == 0.0


def test_a_session_paused_for_approval_then_rejected_shows_its_cash(kernel):
    paused = kernel.call(
        "run_cycle", {"symbols": ["AAPL", "MSFT"], "as_of": "2012-06-01", "approve": True}, transport="cli"
    )
    assert paused.status == "pending_approval"
    assert kernel.store.portfolios.load(paused.session_id) is None  # nothing filled: no book was ever stored
    _cash_only(kernel.call("portfolio", {"session_id": paused.session_id}), "2012-06-01")
    rejected = kernel.call(
        "approve", {"session_id": paused.session_id, "approved": False, "by": "test"}, transport="cli"
    )
    assert rejected.status == "rejected"
    _cash_only(kernel.call("portfolio", {"session_id": paused.session_id}), "2012-06-01")
    with pytest.raises(E.NotFound, match="unknown session 's-nope'"):
        kernel.call("portfolio", {"session_id": "s-nope"})


def test_an_own_data_session_is_valued_on_its_recorded_prices_once_its_file_moved(kernel, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no tradegraph.toml here
    prices = tmp_path / "acme.csv"
    shutil.copy(ACME, prices)
    session = None
    for day in ("2024-03-01", "2024-03-04"):
        out = kernel.call(
            "run_cycle",
            {"symbols": ["ACME"], "as_of": day, "prices": str(prices), **({"session_id": session} if session else {})},
            transport="cli",
        )
        session = out.session_id
    before = kernel.call("portfolio", {"session_id": session})
    assert before.positions, "the session holds nothing: no price would be needed to value it"
    prices.rename(tmp_path / "moved.csv")
    # the session itself can no longer go on without its file (docs/own-data.md) ...
    with pytest.raises(E.BadInput, match="file not found"):
        kernel.call("run_cycle", {"symbols": ["ACME"], "as_of": "2024-03-05", "session_id": session}, transport="cli")
    # ... but its book is valued on the prices its last cycle recorded: the same view
    after = kernel.call("portfolio", {"session_id": session})
    assert after.as_of == before.as_of == "2024-03-04"
    for a, b in zip(after.positions, before.positions, strict=True):
        assert (a.symbol, a.quantity, a.price_date) == (b.symbol, b.quantity, b.price_date)
        assert a.price == pytest.approx(b.price, abs=1e-4)  # recorded at 4 decimals (agent/features/bundle.py)
    assert after.equity == pytest.approx(before.equity, abs=0.01)
    assert after.realized_pnl + after.unrealized_pnl == pytest.approx(after.equity - after.starting_cash, abs=0.01)


def _own_data_session(kernel, prices: Path) -> str:
    session = None
    for day in ("2024-03-01", "2024-03-04"):
        out = kernel.call(
            "run_cycle",
            {"symbols": ["ACME"], "as_of": day, "prices": str(prices), **({"session_id": session} if session else {})},
            transport="cli",
        )
        assert out.status == "completed", out.error
        session = out.session_id
    assert session is not None
    return session


def _doubled(prices: Path) -> None:
    """The same file with every price doubled: a view that read it would show ACME at 164.40 on 2024-03-04."""
    lines = prices.read_text().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    prices.write_text(
        "\n".join([lines[0], *(",".join([r[0], r[1], *(f"{float(v) * 2:.2f}" for v in r[2:6]), r[6]]) for r in rows)])
        + "\n"
    )


def test_a_session_deciding_at_the_close_is_valued_on_the_closes_it_recorded(kernel, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prices = tmp_path / "acme.csv"
    shutil.copy(ACME, prices)
    session = _own_data_session(kernel, prices)
    _doubled(prices)
    view = kernel.call("portfolio", {"session_id": session})
    assert view.positions, "the session holds nothing: no price would be needed to value it"
    # ACME's close on 2024-03-04 in docs/examples/acme.csv, as the session's scan recorded it
    assert [(p.symbol, p.price, p.price_date) for p in view.positions] == [("ACME", 82.2, "2024-03-04")]
    assert view.realized_pnl + view.unrealized_pnl == pytest.approx(view.equity - view.starting_cash, abs=0.01)


def test_a_session_deciding_at_the_open_is_valued_at_its_files_close(kernel, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRADEGRAPH_DECIDE_AT", "open")
    prices = tmp_path / "acme.csv"
    shutil.copy(ACME, prices)
    session = _own_data_session(kernel, prices)
    view = kernel.call("portfolio", {"session_id": session})
    assert view.positions, "the session holds nothing: no price would be needed to value it"
    # its scan recorded 2024-03-04's open (81.53): the book is valued at that day's close from the file
    assert [(p.symbol, p.price, p.price_date) for p in view.positions] == [("ACME", 82.2, "2024-03-04")]
