"""A session goes forward in time (issue 29): its next cycle decides on or after its last one, else bad input
naming both dates (CLI exit 2), and the look-ahead audit flags a recorded cycle whose starting book carries a date
after its own decision."""

from __future__ import annotations

import pytest

from graph.machine import runner
from graph.machine.errors import InputError
from graph.machine.runner import run_state_machine
from graph.services.replay.lookahead import audit_sessions
from graph.transports.cli.main import main
from schemas.portfolio import PortfolioSnapshot, Position
from tests.helpers import mock_store, services_with

LATER, EARLIER = "2012-06-01", "2010-01-04"


@pytest.fixture
def decided():
    """A session whose last cycle decided 2012-06-01."""
    store = mock_store()
    out = run_state_machine("AAPL", LATER, store=store, services=services_with())
    return store, out.session_id


def test_an_earlier_cycle_on_a_session_is_refused_naming_both_dates(decided, capsys):
    store, sid = decided
    before = store.events.count(sid)
    with pytest.raises(InputError) as e:
        run_state_machine("AAPL", EARLIER, store=store, session_id=sid, services=services_with())
    assert EARLIER in str(e.value) and LATER in str(e.value) and f"cycle {sid}:c1 decided" in str(e.value)
    assert main(["run", "--symbols", "AAPL", "--as-of", EARLIER, "--session", sid, "--db", store.uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and EARLIER in err[0] and LATER in err[0], err
    assert store.events.count(sid) == before  # refused before anything was written


def test_the_same_date_and_a_later_one_go_on(decided):
    store, sid = decided
    assert (
        run_state_machine("AAPL", LATER, store=store, session_id=sid, services=services_with()).cycle_id == f"{sid}:c2"
    )
    assert (
        run_state_machine("AAPL", "2012-06-05", store=store, session_id=sid, services=services_with()).cycle_id
        == f"{sid}:c3"
    )


def test_a_book_dated_later_than_the_last_cycle_is_refused_too(decided):
    store, sid = decided
    book = PortfolioSnapshot(
        cash=90_000.0,
        as_of="2012-06-05",
        positions={"AAPL": Position(symbol="AAPL", quantity=10, avg_price=80.0, opened="2012-06-05")},
    )
    store.portfolios.save(sid, book, "outside")
    with pytest.raises(InputError, match="before 2012-06-05.*the book.s as-of"):
        run_state_machine("AAPL", "2012-06-04", store=store, session_id=sid, services=services_with())


def test_the_audit_flags_a_cycle_that_started_from_a_later_book(decided, monkeypatch, capsys):
    """The log an older tradegraph wrote (the guard off): the 2010 cycle started from the 2012 book."""
    store, sid = decided
    book = PortfolioSnapshot(
        cash=90_000.0,
        as_of=LATER,
        positions={"AAPL": Position(symbol="AAPL", quantity=10, avg_price=80.0, opened=LATER, checked_through=LATER)},
    )
    store.portfolios.save(sid, book, "filled")
    monkeypatch.setattr(runner, "refuse_going_back", lambda *a, **k: None)
    back = run_state_machine("AAPL", EARLIER, store=store, session_id=sid, services=services_with())
    report = audit_sessions(store, [sid])
    leaks = [(leak.cycle_id, leak.kind, leak.symbol, leak.dated) for leak in report.leaks]
    assert (back.cycle_id, "book", None, LATER) in leaks and (back.cycle_id, "book", "AAPL", LATER) in leaks
    assert all(leak[0] == back.cycle_id for leak in leaks)  # the 2012 cycle itself is clean
    assert report.checked()["book"] >= 3
    assert main(["audit", "lookahead", sid, "--db", store.uri]) == 1
    out = capsys.readouterr().out
    assert f"LEAK {back.cycle_id}: book AAPL dated {LATER}" in out and "manifest inputs.portfolio" in out
