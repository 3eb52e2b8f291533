"""The CLI is a transport of the kernel: each command with a capability calls it as `cli`, and every kernel
error kind becomes the same exit code and one line."""

from __future__ import annotations

import uuid

import pytest

from graph.kernel import errors as E
from graph.kernel.core import Kernel
from graph.transports.cli.main import main


@pytest.fixture
def calls(monkeypatch):
    seen: list[tuple[str, str]] = []
    real = Kernel.call

    def spy(self, name, args=None, *, transport="local"):
        seen.append((name, transport))
        return real(self, name, args, transport=transport)

    monkeypatch.setattr(Kernel, "call", spy)
    return seen


def test_each_command_goes_through_its_capability(calls, tmp_path, capsys):
    db = f"mongomock://cli_{uuid.uuid4().hex[:10]}"
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--approve", "--json", "--db", db]) == 0
    import json

    session = json.loads(capsys.readouterr().out)["session_id"]
    assert main(["approve", session, "--reject", "--db", db]) == 0
    assert main(["events", session, "--kind", "manifest", "--db", db]) == 0
    assert main(["sessions", "--db", db]) == 0
    assert main(["schemas", "--out", str(tmp_path / "s")]) == 0
    assert main(["features", "AAPL", "--as-of", "2012-06-01", "--json"]) == 0
    assert main(["memory", "search", "AAPL", "stop", "--as-of", "2012-06-02", "--db", db]) == 0
    assert main(["replay", session, "--json", "--db", db]) == 0
    assert main(["replay", session, "--verify", "--db", db]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "backtest",
                "--symbols",
                "AAPL",
                "--start",
                "2011-01-03",
                "--end",
                "2011-02-15",
                "--every",
                "10",
                "--run-id",
                "cli-bt",
                "--json",
                "--db",
                db,
                "--out",
                str(tmp_path / "exp"),
            ]
        )
        == 0
    )
    assert calls == [
        (n, "cli")
        for n in (
            "run_cycle",
            "approve",
            "read_events",
            "list_sessions",
            "contract_schemas",
            "features",
            "memory_search",
            "replay",
            "verify",
            "start_backtest",
            "task_artifacts",
        )
    ]
    # the foreground backtest is a stored task like any other: another transport sees it, ended and complete
    tasks = Kernel.open(db).call("list_tasks", {}).tasks
    assert [(t.run_id, t.status, t.progress.done, t.progress.total) for t in tasks] == [("cli-bt", "succeeded", 4, 4)]


@pytest.mark.parametrize(
    "error,code",
    [
        (E.BadInput("bad as_of '2012-13-01'"), 2),
        (E.NotFound("unknown session 'x'"), 2),
        (E.Conflict("nothing pending"), 2),
        (E.StoreUnavailable("store down"), 3),
        (E.Failed("boom"), 1),
    ],
)
def test_a_kernel_error_kind_is_one_exit_code_and_one_line(monkeypatch, capsys, error, code):
    def refuse(self, name, args=None, *, transport="local"):
        raise error

    monkeypatch.setattr(Kernel, "call", refuse)
    assert main(["sessions", "--db", f"mongomock://cli_{uuid.uuid4().hex[:10]}"]) == code
    err = capsys.readouterr().err.strip()
    assert err == f"tradegraph: error: {error.message}"
