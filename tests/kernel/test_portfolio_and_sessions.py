"""The views a trader reads: `portfolio` (the book at the last as-of) and `sessions` (a table with each last
cycle's status), through the kernel and the CLI."""

from __future__ import annotations

import json
import uuid

import pytest

from graph.kernel import errors as E
from graph.kernel.core import Kernel
from graph.services.replay.session import load_session_log
from graph.transports.cli.main import main


@pytest.fixture
def db():
    return f"mongomock://pv_{uuid.uuid4().hex[:10]}"


def _run(db, capsys, *extra) -> dict:
    assert main(["run", "--symbols", "AAPL,MSFT,IBM,GOOG", "--json", "--db", db, *extra]) in (0,)
    return json.loads(capsys.readouterr().out)


def test_the_book_adds_up_and_matches_the_stored_snapshot(db, capsys):
    # three cycles: buys on 03-01, stops hit on 03-06, new buys on 03-07 (docs/usage.md's and docs/memory.md's session)
    s = _run(db, capsys, "--as-of", "2012-03-01")["session_id"]
    _run(db, capsys, "--as-of", "2012-03-06", "--session", s)
    _run(db, capsys, "--as-of", "2012-03-07", "--session", s)
    k = Kernel.open(db)
    try:
        view = k.call("portfolio", {"session_id": s})
        snapshot, version = k.store.portfolios.load_versioned(s)
        replayed = load_session_log(k.store, s)
    finally:
        k.close()
    trades = [t for c in replayed.cycles for t in c.trades]
    assert view.as_of == "2012-03-07" and view.version == version and view.cash == snapshot.cash
    assert {p.symbol: p.quantity for p in view.positions} == {s_: p.quantity for s_, p in snapshot.positions.items()}
    assert view.fills == len(trades) and any(t.get("reason") == "stop" for t in trades), "exits are counted"
    assert view.starting_cash == 100_000.0
    # what a session without a manifest falls back on: undoing every committed fill gives the same cash
    from graph.services.portfolio_view import cash_before_fills, committed_trades

    k = Kernel.open(db)
    try:
        undone = cash_before_fills(snapshot, committed_trades(k.store.executions.committed(s)))
    finally:
        k.close()
    assert undone == pytest.approx(view.starting_cash, abs=0.01)
    # the identity the view promises: every fee and every closed trade is in realised, nothing twice (fills
    # and cash are stored to 6 decimals, so a cent is far above the rounding and far below any fee)
    assert view.realized_pnl + view.unrealized_pnl == pytest.approx(view.equity - view.starting_cash, abs=0.01)
    assert view.total_pnl == pytest.approx(view.equity - view.starting_cash, abs=1e-9)
    assert view.realized_pnl < 0, "two positions were stopped out at a loss on 2012-03-06"
    for p in view.positions:
        assert p.price_date == "2012-03-07" and p.stop < p.avg_price < p.target
        assert p.unrealized_pnl == pytest.approx((p.price - p.avg_price) * p.quantity)

    assert main(["portfolio", s, "--db", db]) == 0
    table = capsys.readouterr().out
    assert f"portfolio {s} at 2012-03-07" in table and "realised" in table and "IBM" in table


def test_unknown_session_and_a_book_never_stored_are_not_found(db, capsys):
    k = Kernel.open(db)
    try:
        with pytest.raises(E.NotFound, match="unknown session 's-nope'"):
            k.call("portfolio", {"session_id": "s-nope"})
        # a session with events but no stored book (a backtest keeps its own): named as such
        k.store.events.append(
            [
                {
                    "event_id": uuid.uuid4().hex,
                    "session_id": "bt-x",
                    "cycle_id": "bt-x:c1",
                    "ts": 1.0,
                    "state": "RUNNER",
                    "kind": "manifest",
                    "payload": {"config": {}},
                }
            ]
        )
        with pytest.raises(E.NotFound, match="no stored portfolio for session 'bt-x'.*trade history"):
            k.call("portfolio", {"session_id": "bt-x"})
    finally:
        k.close()
    assert main(["portfolio", "s-nope", "--db", db]) == 2
    # the store it was looked for in is named: another folder or $TRADEGRAPH_HOME may hold the session
    assert capsys.readouterr().err.strip() == f"tradegraph: error: unknown session 's-nope' in the store at {db}"


def test_sessions_show_each_last_cycle_status_symbols_and_as_of(db, capsys, monkeypatch):
    done = _run(db, capsys, "--as-of", "2012-06-01")["session_id"]
    paused = _run(db, capsys, "--as-of", "2012-06-04", "--approve")["session_id"]
    assert main(["sessions", "--json", "--db", db]) == 0
    rows = {r["session_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert (rows[done]["status"], rows[done]["as_of"], rows[done]["symbols"]) == (
        "completed",
        "2012-06-01",
        ["AAPL", "MSFT", "IBM", "GOOG"],
    )
    assert (rows[paused]["status"], rows[paused]["as_of"]) == ("pending_approval", "2012-06-04")
    # approved later: the same session's last cycle now reads as completed
    assert main(["approve", paused, "--json", "--db", db]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sessions", "--db", db]) == 0
    table = capsys.readouterr().out
    lines = {ln.split()[1]: ln for ln in table.splitlines() if ln.startswith("│")}
    assert "completed" in lines[paused] and "2012-06-04" in lines[paused] and "AAPL, MSFT, IBM, GOOG" in lines[paused]


def test_a_session_on_its_own_prices_is_valued_on_them(db, capsys, tmp_path, monkeypatch):
    """ACME is in no bundled file: the view must read the prices the session read, without being told again."""
    import shutil
    from pathlib import Path

    monkeypatch.chdir(tmp_path)  # no tradegraph.toml here
    acme = tmp_path / "acme.csv"
    shutil.copy(Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme.csv", acme)
    session, as_of = None, None
    for day in ("2024-03-01", "2024-03-04", "2024-03-05", "2024-03-06", "2024-03-07"):
        extra = ["--session", session] if session else []
        out = json.loads(
            (
                main(["run", "--symbols", "ACME", "--as-of", day, "--prices", str(acme), "--json", "--db", db, *extra]),
                capsys.readouterr().out,
            )[1]
        )
        session, as_of = out["session_id"], day
    k = Kernel.open(db)
    try:
        view = k.call("portfolio", {"session_id": session})
    finally:
        k.close()
    assert view.as_of == as_of
    # valued on ACME's own close of that day, not left unknown
    (p,) = view.positions
    close = next(line for line in acme.read_text().splitlines() if line.startswith(f"ACME,{as_of},"))
    assert p.price == pytest.approx(float(close.split(",")[5])) and view.equity is not None
    assert view.realized_pnl + (view.unrealized_pnl or 0.0) == pytest.approx(view.equity - view.starting_cash, abs=0.01)
