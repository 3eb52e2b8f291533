"""Where the store lives when nothing is set (database/embedded.py resolve_home): $TRADEGRAPH_HOME, else a
`.tradegraph` folder found from the working directory upward, else the per-user data directory, the same from
every folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from database.embedded import PROJECT_DIR, project_home, resolve_home


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/user (a home), tmp/work/a/b (folders without a store); asserts no folder above tmp holds a store, which
    would be found first."""
    assert project_home(tmp_path) is None, f"a {PROJECT_DIR} above {tmp_path} would be found by every test here"
    (tmp_path / "user").mkdir()
    (tmp_path / "work" / "a" / "b").mkdir(parents=True)
    return tmp_path


def test_nothing_set_is_the_per_user_directory_from_any_folder(tree, monkeypatch):
    monkeypatch.setenv("HOME", str(tree / "user"))
    env = {}
    homes = {resolve_home(env, cwd) for cwd in (tree / "work", tree / "work" / "a" / "b", tree / "user")}
    assert homes == {resolve_home(env, tree / "work")}
    home = homes.pop()
    assert home.path == (tree / "user" / ".local" / "share" / "tradegraph").resolve() and home.chosen_by == "user"
    assert not any(p.name == PROJECT_DIR for p in tree.rglob("*")), "resolving a home must create nothing"


def test_xdg_data_home_is_honoured_when_absolute(tree, monkeypatch):
    monkeypatch.setenv("HOME", str(tree / "user"))
    assert resolve_home({"XDG_DATA_HOME": str(tree / "data")}, tree).path == (tree / "data" / "tradegraph").resolve()
    # a relative one is ignored, as the XDG specification says
    assert (
        resolve_home({"XDG_DATA_HOME": "rel"}, tree).path
        == (tree / "user" / ".local" / "share" / "tradegraph").resolve()
    )


def test_a_project_store_found_upward_wins_over_the_per_user_one(tree, monkeypatch):
    monkeypatch.setenv("HOME", str(tree / "user"))
    (tree / "work" / PROJECT_DIR).mkdir()
    for cwd in (tree / "work", tree / "work" / "a", tree / "work" / "a" / "b"):
        home = resolve_home({}, cwd)
        assert home.path == (tree / "work" / PROJECT_DIR).resolve() and home.chosen_by == "project"
    # a nearer one wins over one further up, as git finds the nearest .git
    (tree / "work" / "a" / PROJECT_DIR).mkdir()
    assert resolve_home({}, tree / "work" / "a" / "b").path == (tree / "work" / "a" / PROJECT_DIR).resolve()
    # outside the project: the per-user directory
    assert resolve_home({}, tree / "user").chosen_by == "user"
    # a file of that name is not a store
    (tree / "user" / PROJECT_DIR).write_text("")
    assert resolve_home({}, tree / "user").chosen_by == "user"


def test_tradegraph_home_overrides_everything(tree):
    (tree / "work" / PROJECT_DIR).mkdir()
    home = resolve_home(
        {"TRADEGRAPH_HOME": str(tree / "elsewhere"), "XDG_DATA_HOME": str(tree / "data")}, tree / "work"
    )
    assert home.path == (tree / "elsewhere").resolve() and home.chosen_by == "TRADEGRAPH_HOME"
    assert home.describe() == f"{(tree / 'elsewhere').resolve()} (from $TRADEGRAPH_HOME)"
