"""`sessions` and `portfolio` at 80 columns: no value is cut. Every value shown appears whole (a value of several
words may wrap between them, never inside one), no line is wider than the terminal, nothing ends in an ellipsis,
and the columns left out for width are named under the table."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from graph.transports.cli.main import main

BOX = "│┃"


@pytest.fixture
def db():
    return f"mongomock://fit_{uuid.uuid4().hex[:10]}"


def shown(out: str) -> list[str]:
    assert "…" not in out, out
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    return lines


def words(out: str) -> set[str]:
    return {w for line in out.splitlines() for w in re.split(rf"[\s{BOX}]+", line) if w}


def column(out: str, index: int) -> str:
    """The text of one column, read down the table's body and joined (a folded value comes back whole)."""
    body = [line for line in out.splitlines() if line.startswith("│")]
    return "".join(line.split("│")[index + 1].strip() for line in body)


def listed(db, capsys) -> list[dict]:
    assert main(["sessions", "--json", "--db", db]) == 0
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_sessions_at_80_columns(db, capsys, monkeypatch):
    for day in ("2012-03-01", "2012-03-02"):
        assert main(["run", "--symbols", "AAPL,MSFT,IBM,GOOG", "--as-of", day, "--json", "--db", db]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["sessions", "--db", db]) == 0
    out = capsys.readouterr().out
    lines = shown(out)
    got = {w.rstrip(",") for w in words(out)}
    for s in listed(db, capsys):
        expected = {s["session_id"], s["status"], s["as_of"], f"{s['cycles']:,}", *s["symbols"]}
        assert expected <= got, (expected - got, out)
    left_out = next(line for line in lines if "narrow terminal:" in line)
    assert "size" in left_out and "symbols" not in left_out and "--json has every field" in left_out

    # a session id longer than a column can be folds onto the next lines, whole and in order
    from database import connect
    from graph.services.backtest.loop import run_backtest
    from schemas.simulation import EpisodeConfig

    long_run = "a-run-id-much-longer-than-any-column-of-an-80-column-terminal-could-ever-hold"
    with connect(db) as store:
        run_backtest(
            EpisodeConfig(episode_id=long_run, tickers=["IBM"], initial_cash=1e5, start="2011-03-01", end="2011-03-02"),
            store,
            progress=False,
            out_dir=f"/tmp/{uuid.uuid4().hex}",
            max_steps=1,
        )
    assert main(["sessions", "--db", db]) == 0
    out = capsys.readouterr().out
    shown(out)
    sessions = listed(db, capsys)
    assert column(out, 0) == "".join(s["session_id"] for s in sessions)
    assert column(out, 3) == "".join(s["status"] for s in sessions)  # `session`, `started`, `cycles`, then this

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sessions", "--db", db]) == 0
    wide = capsys.readouterr().out
    assert "narrow terminal" not in wide and "size" in wide and "kind" in wide and long_run in wide


def test_portfolio_at_80_columns(db, capsys, monkeypatch):
    assert main(["run", "--symbols", "AAPL,MSFT,IBM,GOOG", "--as-of", "2012-03-01", "--json", "--db", db]) == 0
    sid = json.loads(capsys.readouterr().out)["session_id"]
    assert main(["portfolio", sid, "--json", "--db", db]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["positions"], "the cycle bought something to show"
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["portfolio", sid, "--db", db]) == 0
    out = capsys.readouterr().out
    shown(out)
    got = words(out)
    for p in view["positions"]:
        expected = {
            p["symbol"],
            f"{p['quantity']:g}",
            f"{p['price']:,.2f}",
            f"{p['market_value']:,.2f}",
            f"{p['unrealized_pnl']:+,.2f}",
            f"({p['unrealized_pct']:+.2f}%)",
        }
        assert expected <= got, (expected - got, out)
    assert f"equity {view['equity']:,.2f}" in out
