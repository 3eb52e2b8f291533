"""One home from any folder: with nothing set, a session started in one folder continues from another (the
docs/usage.md's and docs/own-data.md's promise); `store status` says where the store is and why; a session not found
names the store it was looked for in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from database.embedded import PROJECT_DIR, project_home
from graph.transports.cli.main import main
from tests.helpers import Answer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "docs" / "examples" / "acme.csv"


@pytest.fixture
def tradegraph(monkeypatch, capsys):
    """tradegraph(cwd, *argv, user=..., **env): the CLI as a user runs it, in this process (`main([...])`, what is
    checked is where the store is found from a folder, not how a process starts): working directory `cwd`, no
    TRADEGRAPH_HOME, MONGODB_URI or XDG_DATA_HOME unless given, HOME = `user`. A store a call starts is stopped
    when the call closes it, as the process's exit would."""

    def call(cwd: Path, *argv: str, user: Path, **env: str) -> Answer:
        with monkeypatch.context() as mp:
            for name in ("TRADEGRAPH_HOME", "MONGODB_URI", "XDG_DATA_HOME"):
                mp.delenv(name, raising=False)
            for name, value in {"HOME": str(user), "TRADEGRAPH_LLM": "offline", **env}.items():
                mp.setenv(name, value)
            mp.chdir(cwd)
            capsys.readouterr()
            code = main(list(argv))
            out = capsys.readouterr()
        return Answer(code, out.out, out.err)

    return call


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    assert project_home(tmp_path) is None, f"a {PROJECT_DIR} above {tmp_path} would be found first"
    out = {name: tmp_path / name for name in ("user", "project", "elsewhere")}
    for p in out.values():
        p.mkdir()
    shutil.copy(ACME, out["project"] / "acme.csv")
    return out


def test_a_session_continues_from_another_folder_and_no_folder_gets_a_store(folders, tradegraph):
    user, project, elsewhere = folders["user"], folders["project"], folders["elsewhere"]
    first = tradegraph(
        project, "run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", "acme.csv", "--json", user=user
    )
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout)["session_id"]
    # from another folder, with no toml and no flag: the same store, so the session and the file it read
    second = tradegraph(
        elsewhere, "run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", session, "--json", user=user
    )
    assert second.returncode == 0, second.stderr
    out = json.loads(second.stdout)
    assert out["session_id"] == session and out["cycle_id"] == f"{session}:c2"
    assert out["contracts"]["SCANNING"]["universe"] == ["ACME"]
    # the store is the per-user one; neither working folder got a store of its own
    data = user / ".local" / "share" / "tradegraph" / "data"
    assert (data / "tradegraph.db").is_file()
    assert not (project / PROJECT_DIR).exists() and not (elsewhere / PROJECT_DIR).exists()
    replay = tradegraph(elsewhere, "replay", session, "--check-chain", user=user)
    assert replay.returncode == 0 and "hash chain intact" in replay.stdout, replay.stderr


def test_store_status_names_the_store_and_why(folders, tradegraph):
    user, project = folders["user"], folders["project"]
    per_user = (user / ".local" / "share" / "tradegraph").resolve()
    st = tradegraph(project / ".." / "elsewhere", "store", "status", user=user)
    assert st.returncode == 0, st.stderr
    assert st.stdout.splitlines()[0] == f"store: embedded at {per_user} (the per-user default)"
    assert f"spool: {per_user / 'spool'}" in st.stdout
    # a project store, found from a subfolder of the project
    (project / PROJECT_DIR).mkdir()
    (project / "src" / "deep").mkdir(parents=True)
    st = tradegraph(project / "src" / "deep", "store", "status", "--json", user=user)
    status = json.loads(st.stdout)
    assert status["store"] == f"embedded at {(project / PROJECT_DIR).resolve()}" and status["chosen_by"] == "project"
    assert status["embedded"]["running"] is False  # asking where the store is starts nothing
    assert not (project / PROJECT_DIR / "data").exists()
    st = tradegraph(project, "store", "status", user=user, TRADEGRAPH_HOME=str(folders["elsewhere"] / "h"))
    assert (
        st.stdout.splitlines()[0] == f"store: embedded at {(folders['elsewhere'] / 'h').resolve()} "
        f"(from $TRADEGRAPH_HOME)"
    )
    st = tradegraph(project, "store", "status", "--db", "mongodb://u:secret@db.example:27017/x", user=user)
    assert st.stdout.splitlines()[0] == "store: mongodb://u:***@db.example:27017/x (from --db)"


def test_a_session_not_found_names_the_store_searched(folders, tradegraph):
    user, project = folders["user"], folders["project"]
    first = tradegraph(
        project, "run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", "acme.csv", "--json", user=user
    )
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout)["session_id"]
    other = folders["elsewhere"] / "other-store"
    # another store: the session is not there, and the error says where it looked (not "unknown symbol 'ACME'",
    # which the bundled data would answer)
    for argv in (
        ("run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", session),
        ("replay", session),
        ("portfolio", session),
    ):
        r = tradegraph(folders["elsewhere"], *argv, user=user, TRADEGRAPH_HOME=str(other))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (argv, r.stderr)
        assert lines[0] == (
            f"tradegraph: error: unknown session '{session}' in the store at {other.resolve()} (from $TRADEGRAPH_HOME)"
        ), argv
