"""Links planted in a run folder (issue 28, hole 6): every file a run reads or writes and every artifact served is
opened without following a link (graph/services/run_files.py), so a link to a file outside is refused in one line
naming the path (CLI exit 2, HTTP 422) and the file outside is neither truncated, written nor served."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from graph.kernel import Kernel
from graph.services.run_files import (
    UnsafeRunPath,
    open_run_file,
    read_run_text,
    run_file_exists,
    save_figure,
    write_run_atomic,
)
from graph.transports.cli.main import main

SECRET = "precious: must stay as it is\n"  # no newline-terminated JSON: a log reader would cut it to 0 bytes
RUN = {"symbols": ["AAPL"], "start": "2012-03-01", "end": "2012-03-20", "every": 5, "memory": "off"}


@pytest.fixture
def victim(tmp_path) -> Path:
    p = tmp_path / "outside" / "victim.txt"
    p.parent.mkdir()
    p.write_text(SECRET)
    return p


def test_each_opening_refuses_a_link_and_leaves_its_target_alone(tmp_path, victim):
    run = tmp_path / "exp" / "r1"
    run.mkdir(parents=True)
    link = run / "episode_log.jsonl"
    link.symlink_to(victim)
    for attempt in (
        lambda: open_run_file(link, "r+b"),
        lambda: open_run_file(link, "a"),
        lambda: open_run_file(link, "w"),
        lambda: read_run_text(link),
        lambda: run_file_exists(link),
        lambda: write_run_atomic(link, "x\n"),
    ):
        with pytest.raises(UnsafeRunPath) as e:
            attempt()
        assert str(e.value).startswith(f"refusing {link}: it is a symbolic link") and "\n" not in str(e.value)
    assert victim.read_text() == SECRET and link.is_symlink()
    # the temporary file of an atomic write is a link: refused too
    (run / "config.json.tmp").symlink_to(victim)
    with pytest.raises(UnsafeRunPath, match="config.json.tmp"):
        write_run_atomic(run / "config.json", "{}\n")
    # the run folder itself a link to a folder outside
    (tmp_path / "exp" / "r2").symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(UnsafeRunPath, match="the run folder is a symbolic link"):
        open_run_file(tmp_path / "exp" / "r2" / "victim.txt", "w")
    # a FIFO would hang a reader
    os.mkfifo(run / "result.json")
    with pytest.raises(UnsafeRunPath, match="not a regular file"):
        read_run_text(run / "result.json")
    assert victim.read_text() == SECRET
    # and regular files work
    write_run_atomic(run / "ok.json", "{}\n")
    assert read_run_text(run / "ok.json") == "{}\n" and run_file_exists(run / "ok.json")
    assert not run_file_exists(run / "missing.json") and not run_file_exists(tmp_path / "nowhere" / "x.json")


def test_a_figure_is_not_saved_through_a_link(tmp_path, victim):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (tmp_path / "equity.png").symlink_to(victim)
    fig = plt.figure()
    with pytest.raises(UnsafeRunPath, match="equity.png"):
        save_figure(fig, tmp_path / "equity.png")
    plt.close(fig)
    assert victim.read_text() == SECRET


def test_backtest_refuses_a_linked_episode_log_and_truncates_nothing(tmp_path, victim, capsys):
    exp = tmp_path / "experiments"
    (exp / "newrun").mkdir(parents=True)
    (exp / "newrun" / "episode_log.jsonl").symlink_to(victim)
    code = main(
        [
            "backtest",
            "--symbols",
            "AAPL",
            "--start",
            RUN["start"],
            "--end",
            RUN["end"],
            "--every",
            "5",
            "--memory",
            "off",
            "--run-id",
            "newrun",
            "--out",
            str(exp),
            "--db",
            f"mongomock://links_{uuid.uuid4().hex[:8]}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert [line for line in err if "refusing" in line] == [line for line in err if "episode_log.jsonl" in line]
    assert any(f"refusing {exp / 'newrun' / 'episode_log.jsonl'}: it is a symbolic link" in line for line in err)
    assert victim.read_text() == SECRET


def test_an_artifact_swapped_for_a_link_is_not_served(tmp_path, victim):
    from fastapi.testclient import TestClient

    from graph.transports.http import create_app

    k = Kernel.open(f"mongomock://links_{uuid.uuid4().hex[:10]}", experiments_dir=tmp_path / "exp", env={})
    try:
        t = k.call("start_backtest", {**RUN, "run_id": "served"})
        list(k.watch(t.task_id, poll_s=0.1, timeout_s=180))
        http = TestClient(create_app(k))
        assert http.get(f"/tasks/{t.task_id}/artifacts/config.json").status_code == 200
        cfg = Path(t.run_dir) / "config.json"
        cfg.unlink()
        cfg.symlink_to(victim)
        for path in (f"/tasks/{t.task_id}/artifacts/config.json", f"/tasks/{t.task_id}/artifacts"):
            r = http.get(path)
            assert r.status_code == 422, (path, r.text)
            assert "precious" not in r.text and f"refusing {cfg}: it is a symbolic link" in r.json()["message"]
        # resuming the run reads its config: refused the same way, nothing written through the link
        with pytest.raises(Exception, match="symbolic link"):
            k.call("start_backtest", {**RUN, "run_id": "served"})
        assert victim.read_text() == SECRET
    finally:
        k.close()
