"""A store URI pymongo can't parse and a home that can't be a store's folder are bad input (issue 29): exit 2 and
one line naming the value, before anything is opened; an empty TRADEGRAPH_HOME is refused, never a silent fall back
to another store. (They exited 3, a store outage, or were ignored.)"""

from __future__ import annotations

import pytest

from graph.transports.cli.main import main


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "uri, why",
    [
        ("mongodb://:::/", "Reserved characters"),
        ("mongodb://127.0.0.1:99999/db", "Port must be an integer"),
        ("mongodb://127.0.0.1/db?retryWritez=false", "Unknown option"),
    ],
)
def test_a_store_uri_pymongo_refuses_is_bad_input(uri, why, monkeypatch, capsys):
    monkeypatch.setenv("MONGODB_URI", uri)
    assert main(["sessions"]) == 2
    line = _one_line(capsys)
    assert f"MONGODB_URI={uri!r} is not a valid store URI" in line and why in line
    monkeypatch.delenv("MONGODB_URI")
    assert main(["sessions", "--db", uri]) == 2
    assert f"--db {uri!r} is not a valid store URI" in _one_line(capsys)


@pytest.mark.parametrize(
    "home, why",
    [("/proc/tg", "can't be created"), ("", "is empty"), ("  ", "is empty"), ("/etc/hostname", "is not a directory")],
)
def test_an_impossible_or_empty_home_is_bad_input(home, why, monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_HOME", home)
    monkeypatch.delenv("MONGODB_URI", raising=False)
    assert main(["sessions"]) == 2
    line = _one_line(capsys)
    assert f"TRADEGRAPH_HOME={home!r} {why}" in line


def test_a_home_not_made_yet_is_fine_and_the_check_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "new" / "deeper" / "home"))
    assert main(["sessions", "--db", "mongomock://home_probe"]) == 0
    assert list(tmp_path.iterdir()) == []
