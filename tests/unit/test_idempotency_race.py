"""A duplicate keyed request reads the first's record while the first still runs, and the first answers before
that read's reply is back: the duplicate must get the first's answer (a repeat), never "cut off" (409, "it may have
run in part, use a new key"). Found as a flaky 409 in a storm of four keyed backtests on a loaded machine.

The race is injected at the store: the record's read is slow (its reply arrives after the first request has
stored its answer and let go of its claim), as a read over a busy connection is."""

from __future__ import annotations

from database.idempotency import IdempotencyKeys
from tests.helpers import mock_store


def _slow_read_once(monkeypatch, col, meanwhile) -> None:
    """The collection's next find_one returns what it read, after `meanwhile` has run."""
    real = col.find_one
    pending = [meanwhile]

    def find_one(*args, **kwargs):
        doc = real(*args, **kwargs)
        while pending:
            pending.pop()()  # happens while this read's reply is on its way
        return doc

    monkeypatch.setattr(col, "find_one", find_one)


def test_a_duplicate_whose_read_the_first_answer_overtakes_gets_that_answer(monkeypatch):
    store = mock_store()
    keys = IdempotencyKeys(store.db)
    first = keys.begin("caller:http:anonymous", "k1", "start_backtest", "fp")
    assert first.state == "run"
    _slow_read_once(monkeypatch, keys.col, lambda: keys.finish(first.record, "202", '{"task_id": "t"}', None, None))
    second = keys.begin("caller:http:anonymous", "k1", "start_backtest", "fp")
    assert second.state == "repeat", (second.state, second.live)
    assert second.record["response"] == '{"task_id": "t"}'


def test_a_first_that_was_really_cut_off_still_reads_as_cut_off(monkeypatch):
    store = mock_store()
    keys = IdempotencyKeys(store.db)
    first = keys.begin("caller:http:anonymous", "k2", "start_backtest", "fp")
    _slow_read_once(monkeypatch, keys.col, lambda: keys.abandon(first.record))  # the store went away mid-run
    second = keys.begin("caller:http:anonymous", "k2", "start_backtest", "fp")
    assert (second.state, second.live) == ("busy", False)


def test_a_first_still_running_reads_as_busy_and_live():
    store = mock_store()
    keys = IdempotencyKeys(store.db)
    keys.begin("caller:http:anonymous", "k3", "start_backtest", "fp")
    second = keys.begin("caller:http:anonymous", "k3", "start_backtest", "fp")
    assert (second.state, second.live) == ("busy", True)


def test_an_approver_whose_read_the_first_decision_overtakes_is_told_who_decided(monkeypatch):
    """The same race on an approval's claim: the first approver settles while the second's read of its claim is on
    the way. The second must lose, and the decided claim (what losers are shown) must stay, not be taken over."""
    from database.approvals import Decisions

    store = mock_store()
    approvals = Decisions(store.db)
    token, _ = approvals.claim("s:c1", "s", approved=True, by="alice")
    assert token is not None
    _slow_read_once(monkeypatch, approvals.col, lambda: approvals.settle("s:c1", token, "completed"))
    second, held = approvals.claim("s:c1", "s", approved=False, by="bob")
    assert second is None and held is not None
    stored = approvals.col.find_one({"_id": "s:c1"})  # the injected delay is spent: a plain read
    assert (stored["by"], stored["state"], stored["status"]) == ("alice", "decided", "completed")
