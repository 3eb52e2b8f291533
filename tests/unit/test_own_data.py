"""Your own data from the CLI: --prices/--news/--fundamentals and tradegraph.toml's [data] on run, backtest and
features; a bad file is one line and exit 2, never the bundled data instead; a continued session, a resumed
backtest and replay --verify read the recorded files without being told again, and a file changed since is a
reported difference. All in-process, on mongomock, with the shipped fictional ACME example."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path

import pytest

from agent.data.market import VENDORED_CSV, DataError
from agent.data.sources import DataFiles, Unavailable, load_file
from graph.machine.manifest import recorded_sources
from graph.transports.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ACME_CSV = ROOT / "docs" / "examples" / "acme.csv"


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A working directory with no tradegraph.toml, $TRADEGRAPH_CONFIG unset, a copy of the ACME example and a
    mongomock store URI shared by every command of the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRADEGRAPH_CONFIG", raising=False)
    acme = tmp_path / "acme.csv"
    shutil.copy(ACME_CSV, acme)
    return acme, f"mongomock://own_{uuid.uuid4().hex[:10]}"


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def _manifests(uri: str, session: str) -> list[dict]:
    from database.connection import connect

    store = connect(uri)
    return [e["payload"] for e in store.events.read(session, kind="manifest")]


def test_a_cycle_on_your_own_prices_continues_and_verifies_without_the_flag(env, capsys):
    acme, db = env
    assert main(["run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", str(acme), "--json", "--db", db]) == 0
    first = _json(capsys)
    assert first["status"] == "completed" and first["contracts"]["SCANNING"]["snapshots"][0]["price"] == 78.74
    session = first["session_id"]
    assert main(["run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", session, "--json", "--db", db]) == 0
    assert _json(capsys)["contracts"]["SCANNING"]["snapshots"][0]["price"] == 82.2
    sha = hashlib.sha256(acme.read_bytes()).hexdigest()
    for m in _manifests(db, session):  # both cycles: the file and its content, the rest the bundled samples
        assert m["data"]["market"] == {"source": str(acme.resolve()), "sha256": sha}
        assert m["data"]["news"]["bundled"] and m["data"]["fundamentals"]["bundled"]
    assert main(["replay", session, "--verify", "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.count("IDENTICAL") == 2 and "replay identical to the recording" in out and "differs" not in out


def test_a_changed_file_is_a_reported_hash_difference_and_never_read(env, capsys):
    acme, db = env
    assert main(["run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", str(acme), "--json", "--db", db]) == 0
    session = _json(capsys)["session_id"]
    recorded = hashlib.sha256(acme.read_bytes()).hexdigest()
    with acme.open("a") as fh:  # the user appends a day
        fh.write("ACME,2025-01-02,47.1,47.9,46.5,47.5,1000000\n")
    now = hashlib.sha256(acme.read_bytes()).hexdigest()
    assert main(["replay", session, "--verify", "--db", db]) == 0  # the recording is the truth: contracts identical
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert (
        "IDENTICAL" in out
        and (
            f"data source market.sha256: content hash differs: {acme.resolve()} changed since "
            f"the run (recorded {recorded[:12]}…, now {now[:12]}…)"
        )
        in out
    )
    # the replay's services hold no data for it: reading it fails naming why, instead of reading today's file
    sources, lines = recorded_sources(_manifests(db, session)[0]["data"])
    assert isinstance(sources["market"], Unavailable) and len(lines) == 1
    with pytest.raises(DataError, match="changed since the run was recorded"):
        sources["market"].bars("ACME")
    # a continued session reads the file as it is now (by path): the appended day is there
    assert main(["run", "--symbols", "ACME", "--as-of", "2025-01-02", "--session", session, "--json", "--db", db]) == 0
    assert _json(capsys)["contracts"]["SCANNING"]["snapshots"][0]["price"] == 47.5
    acme.unlink()
    assert main(["replay", session, "--verify", "--db", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"data source market.source: recorded file {acme.resolve()} is missing" in out
    assert main(["run", "--symbols", "ACME", "--as-of", "2025-01-02", "--session", session, "--db", db]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tradegraph: error: prices (as session '{session}' read it): {acme.resolve()}: file not found"
    )


def test_a_backtest_on_your_own_prices_verifies_and_resumes_only_on_its_file(env, tmp_path, capsys):
    acme, db = env
    args = [
        "backtest",
        "--symbols",
        "ACME",
        "--start",
        "2024-01-02",
        "--end",
        "2024-02-15",
        "--every",
        "5",
        "--run-id",
        "acme-bt",
        "--json",
        "--db",
        db,
        "--out",
        str(tmp_path / "exp"),
    ]
    assert main([*args, "--prices", str(acme)]) == 0
    result = _json(capsys)
    assert result["decision_points"] == 7 and result["actions"].get("failed", 0) == 0
    assert main(["replay", "bt-acme-bt", "--verify", "--db", db]) == 0
    out = capsys.readouterr().out
    # (today's memory mode differs from the backtest's, reported as ever; nothing about the data)
    assert out.count("IDENTICAL") == 7 and "data source" not in out
    # the same run id again, no flag: it reads what the run read (done already, so the same result), not what a
    # project toml names
    _write(tmp_path / "zzz.csv", acme.read_text().replace("ACME,", "ZZZ,"))
    _write(tmp_path / "tradegraph.toml", '[data]\nprices = "zzz.csv"\n')
    assert main(args) == 0
    assert _json(capsys)["metrics"] == result["metrics"]
    other = tmp_path / "other.csv"
    shutil.copy(acme, other)
    assert main([*args, "--prices", str(other)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tradegraph: error: run 'acme-bt' was run on prices {acme.resolve()}, not {other.resolve()}: resume it "
        f"without --prices (or with the same file), or start a new run id"
    )


def test_tradegraph_toml_from_the_directory_or_the_env_and_flags_win(env, tmp_path, monkeypatch, capsys):
    acme, db = env
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    shutil.copy(acme, project / "data" / "acme.csv")
    zzz = project / "data" / "zzz.csv"
    zzz.write_text(acme.read_text().replace("ACME,", "ZZZ,"))
    (project / "tradegraph.toml").write_text('[data]\nprices = "data/acme.csv"\n')
    monkeypatch.chdir(project)  # relative to the toml's folder
    assert main(["features", "ACME", "--as-of", "2024-03-01", "--json"]) == 0
    assert _json(capsys)["technical"]["close"] == 78.74
    monkeypatch.chdir(tmp_path)  # another directory: the file named by $TRADEGRAPH_CONFIG
    monkeypatch.setenv("TRADEGRAPH_CONFIG", str(project / "tradegraph.toml"))
    assert main(["run", "--symbols", "ACME", "--as-of", "2024-03-01", "--json", "--db", db]) == 0
    session = _json(capsys)["session_id"]
    assert _manifests(db, session)[0]["data"]["market"]["source"] == str((project / "data" / "acme.csv").resolve())
    # a flag overrides the file's entry
    assert main(["features", "ZZZ", "--as-of", "2024-03-01", "--prices", str(zzz), "--json"]) == 0
    assert _json(capsys)["symbol"] == "ZZZ"
    assert main(["features", "ZZZ", "--as-of", "2024-03-01"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tradegraph: error: unknown symbol 'ZZZ' (known: ACME) in prices file "
        f"{(project / 'data' / 'acme.csv').resolve()}"
    )


def _bad_file(kind: str, d: Path) -> tuple[Path, str]:
    """A path to a file that cannot be used, and what the error says about it."""
    if kind == "missing":
        return d / "nope.csv", "file not found"
    if kind == "a folder":
        (d / "folder.csv").mkdir()
        return d / "folder.csv", "not a regular file, nor a StockBench data tree (no storage/parquet/ in it)"
    bad = d / "bad.csv"
    bad.write_text("symbol,date,open,high,low,close,volume\nACME,2024-03-01,1,2,1,x,5\n")
    return bad, "row 2, column 'close': not a number: 'x'"


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--symbols", "AAPL", "--as-of", "2012-06-01"],
        ["backtest", "--symbols", "AAPL", "--start", "2012-06-01", "--end", "2012-06-29"],
        ["features", "AAPL", "--as-of", "2012-06-01"],
    ],
    ids=["run", "backtest", "features"],
)
@pytest.mark.parametrize("bad", ["missing", "a folder", "malformed"])
def test_a_bad_file_is_one_line_naming_the_flag_and_exit_2_never_the_bundled_data(env, tmp_path, capsys, command, bad):
    path, why = _bad_file(bad, tmp_path)
    # AAPL is in the bundled data: falling back to it would succeed, so exit 2 proves nothing fell back
    db = [] if command[0] == "features" else ["--db", env[1]]
    assert main([*command, *db, "--prices", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"tradegraph: error: --prices {path}: {path.resolve()}: {why}\n"


@pytest.mark.parametrize(
    "toml,line",
    [
        ('[data]\nprices = "nope.csv"\n', "tradegraph.toml [data] prices = 'nope.csv': {d}/nope.csv: file not found"),
        (
            '[data]\nprice = "acme.csv"\n',
            "tradegraph.toml: [data] price: unknown key (known: prices, news, fundamentals, stockbench)",
        ),
        ("[data]\nprices = 3\n", "tradegraph.toml: [data] prices = 3: expected a file path"),
        (
            '[data\nprices = "acme.csv"\n',
            "tradegraph.toml: invalid TOML: Expected ']' at the end of a table declaration (at line 1, column 6)",
        ),
        (
            '[data]\nnews = "acme.csv"\n',
            "tradegraph.toml [data] news = 'acme.csv': {d}/acme.csv: line 1: invalid JSON (Expecting value)",
        ),
    ],
)
def test_a_bad_toml_entry_is_one_line_naming_the_key(env, tmp_path, capsys, toml, line):
    (tmp_path / "tradegraph.toml").write_text(toml)
    assert main(["features", "AAPL", "--as-of", "2012-06-01"]) == 2
    assert capsys.readouterr().err == f"tradegraph: error: {line.format(d=tmp_path.resolve())}\n"


def test_a_missing_config_named_by_the_env_is_exit_2(env, monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_CONFIG", "elsewhere.toml")
    assert main(["features", "AAPL", "--as-of", "2012-06-01"]) == 2
    assert capsys.readouterr().err == "tradegraph: error: $TRADEGRAPH_CONFIG=elsewhere.toml: file not found\n"


def test_unknown_symbol_names_the_data_file_searched(env, capsys):
    acme, db = env
    assert main(["run", "--symbols", "ACME", "--as-of", "2012-06-01", "--db", db]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tradegraph: error: unknown symbol 'ACME' (known: AAPL, FB, GOOG, IBM, MSFT) in the bundled sample prices "
        f"{VENDORED_CSV} (your own prices: docs/own-data.md)"
    )
    assert (
        main(
            [
                "backtest",
                "--symbols",
                "ACMX",
                "--start",
                "2024-01-02",
                "--end",
                "2024-02-15",
                "--db",
                db,
                "--prices",
                str(acme),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.strip() == (
        f"tradegraph: error: unknown symbol 'ACMX' (known: ACME) in prices file {acme.resolve()}"
    )


def test_own_news_and_fundamentals_reach_the_bundle(env, tmp_path, capsys):
    acme, _ = env
    news = _write(
        tmp_path / "acme_news.jsonl",
        '{"symbol": "ACME", "published_at": "2024-02-20T14:00:00Z", "headline": "Acme wins a big contract"}\n'
        '{"symbol": "ACME", "published_at": "2024-03-01T22:00:00Z", "headline": "After the close: not seen"}\n',
    )
    fundamentals = _write(
        tmp_path / "acme_fundamentals.json",
        json.dumps(
            {
                "source": "mine",
                "records": [{"symbol": "ACME", "as_of": "2023-12-31", "reported_at": "2024-02-10", "pe": 18.5}],
            }
        ),
    )
    assert (
        main(
            [
                "features",
                "ACME",
                "--as-of",
                "2024-03-01",
                "--prices",
                str(acme),
                "--news",
                str(news),
                "--fundamentals",
                str(fundamentals),
                "--json",
            ]
        )
        == 0
    )
    bundle = _json(capsys)
    assert bundle["news"]["unique_count"] == 1 and bundle["fundamentals"]["pe"] == 18.5
    assert bundle["fundamentals"]["source"] == "mine"


def test_files_load_once_per_version_and_the_bundled_path_is_the_default_object(tmp_path):
    from agent.data.market import default_market_data

    f = tmp_path / "a.csv"
    shutil.copy(ACME_CSV, f)
    first = load_file("prices", f)
    assert load_file("prices", str(f)) is first  # services per call reuse it (and its indicator frames)
    with f.open("a") as fh:
        fh.write("ACME,2025-01-02,47.1,47.9,46.5,47.5,1000000\n")
    assert load_file("prices", f) is not first and load_file("prices", f).date_range("ACME")[1].year == 2025
    assert load_file("prices", VENDORED_CSV) is default_market_data()
    assert DataFiles(prices="a").over(DataFiles(prices="b", news="n")) == DataFiles(prices="a", news="n")


def test_a_bad_file_given_to_the_kernel_is_bad_input_naming_its_field(tmp_path):
    from graph.kernel import Kernel
    from graph.kernel.errors import BadInput

    k = Kernel.open(f"mongomock://own_{uuid.uuid4().hex[:8]}", experiments_dir=tmp_path / "exp", env={})
    with pytest.raises(BadInput) as e:
        k.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01", "news": str(tmp_path / "none.jsonl")})
    assert e.value.field == "news" and e.value.message == f"news: {tmp_path.resolve()}/none.jsonl: file not found"
    with pytest.raises(BadInput) as e:
        k.call("features", {"symbol": "AAPL", "as_of": "2012-06-01", "prices": "a\x00b"})
    assert e.value.field == "prices"


def test_the_data_fields_travel_over_http_and_mcp_like_any_other(env):
    import anyio
    from fastapi.testclient import TestClient

    from graph.kernel import Kernel
    from graph.transports.http import create_app
    from graph.transports.mcp import create_server

    acme, _ = env
    k = Kernel.open(f"mongomock://own_{uuid.uuid4().hex[:8]}", env={"TRADEGRAPH_DATA_DIRS": str(acme.parent)})
    http = TestClient(create_app(k))
    r = http.get("/features/ACME", params={"as_of": "2024-03-01", "prices": str(acme)})
    assert r.status_code == 200 and r.json()["technical"]["close"] == 78.74
    r = http.get("/features/ACME", params={"as_of": "2024-03-01", "prices": str(acme.with_name("gone.csv"))})
    assert r.status_code == 422 and r.json() == {
        "error": "bad_input",
        "field": "prices",
        "message": f"prices: {acme.with_name('gone.csv')}: file not found",
    }
    tools = {t.name: t for t in anyio.run(create_server(k).list_tools)}
    for name in ("run_cycle", "start_backtest", "features"):  # the caller is told whose disk the path is on
        props = tools[name].input_schema["properties"]
        assert all(
            "a path on the machine the kernel runs on" in props[f]["description"]
            for f in ("prices", "news", "fundamentals")
        ), name


def test_over_the_network_only_files_in_the_folders_the_server_allows(env, tmp_path):
    from fastapi.testclient import TestClient

    from graph.kernel import Kernel
    from graph.transports.http import create_app

    acme, _ = env
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    shutil.copy(acme, allowed / "acme.csv")
    (allowed / "escape.csv").symlink_to(acme)  # a link out of the folder is out of the folder
    k = Kernel.open(f"mongomock://own_{uuid.uuid4().hex[:8]}", env={"TRADEGRAPH_DATA_DIRS": str(allowed)})
    http = TestClient(create_app(k))
    ok = http.get("/features/ACME", params={"as_of": "2024-03-01", "prices": str(allowed / "acme.csv")})
    assert ok.status_code == 200, ok.text
    for path in (str(acme), "/proc/self/environ", str(allowed / "escape.csv"), "~nosuchuser/x.csv"):
        r = http.post("/cycles", json={"symbols": ["ACME"], "as_of": "2024-03-01", "prices": path})
        assert r.status_code == 403 and r.json() == {
            "error": "forbidden",
            "field": "prices",
            "message": f"prices: reading {path} is refused over http: list "
            f"its folder in TRADEGRAPH_DATA_DIRS on the server to allow it",
        }
    r = http.post(
        "/backtests", json={"symbols": ["ACME"], "start": "2024-01-02", "end": "2024-02-01", "news": str(acme)}
    )
    assert r.status_code == 403 and r.json()["field"] == "news"
    # in-process (and on the CLI) the caller already runs code as this user: any path
    assert k.call("features", {"symbol": "ACME", "as_of": "2024-03-01", "prices": str(acme)}).technical.close == 78.74


def test_every_command_reads_the_config_file_and_the_data_dirs_setting_at_start(env, tmp_path, monkeypatch, capsys):
    (tmp_path / "tradegraph.toml").write_text('[data]\nprices = ["a.csv"]\n')
    assert main(["sessions", "--db", env[1]]) == 2
    assert (
        capsys.readouterr().err
        == "tradegraph: error: tradegraph.toml: [data] prices = ['a.csv']: expected a file path\n"
    )
    (tmp_path / "tradegraph.toml").unlink()
    monkeypatch.setenv("TRADEGRAPH_DATA_DIRS", str(tmp_path / "nowhere"))
    assert main(["sessions", "--db", env[1]]) == 2
    assert capsys.readouterr().err == (
        f"tradegraph: error: TRADEGRAPH_DATA_DIRS='{tmp_path / 'nowhere'}': '{tmp_path / 'nowhere'}' is not a folder\n"
    )


def test_a_continued_session_keeps_its_files_over_the_projects_toml(env, tmp_path, monkeypatch, capsys):
    acme, db = env
    assert main(["run", "--symbols", "ACME", "--as-of", "2024-03-01", "--prices", str(acme), "--json", "--db", db]) == 0
    session = _json(capsys)["session_id"]
    project = tmp_path / "project"
    project.mkdir()
    (project / "zzz.csv").write_text(acme.read_text().replace("ACME,", "ZZZ,"))
    (project / "tradegraph.toml").write_text('[data]\nprices = "zzz.csv"\n')
    monkeypatch.chdir(project)
    # the toml names another file: the session still reads the one it read (ACME is not in zzz.csv)
    assert main(["run", "--symbols", "ACME", "--as-of", "2024-03-04", "--session", session, "--json", "--db", db]) == 0
    assert _json(capsys)["contracts"]["SCANNING"]["snapshots"][0]["price"] == 82.2
    # a flag is a decision: it switches the session to that file
    shutil.copy(acme, project / "acme_v2.csv")
    assert (
        main(
            [
                "run",
                "--symbols",
                "ACME",
                "--as-of",
                "2024-03-05",
                "--session",
                session,
                "--prices",
                "acme_v2.csv",
                "--json",
                "--db",
                db,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert _manifests(db, session)[-1]["data"]["market"]["source"] == str((project / "acme_v2.csv").resolve())
    # and a new session in the project reads the toml's
    assert main(["run", "--symbols", "ZZZ", "--as-of", "2024-03-01", "--json", "--db", db]) == 0
    assert _json(capsys)["contracts"]["SCANNING"]["snapshots"][0]["symbol"] == "ZZZ"
