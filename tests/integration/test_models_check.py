"""`tradegraph models check` against fakes answering as llama.cpp's server, Ollama's /v1, vLLM and LM Studio do
(tests/fakes/fake_compat.py), and the runs that follow using the method it found (issue 31): a server that refuses
a method is one line naming its answer, never four retries of a request that cannot succeed."""

import json
import uuid

import pytest

from graph.transports.cli.main import main
from tests.fakes.fake_compat import FakeCompat

pytestmark = pytest.mark.integration

RUN = ["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--json"]
# flavour -> (the method runs use, the context window found, the methods refused)
EXPECTED = {
    "llama_cpp": ("json_object_schema", 2048, {"json_schema"}),
    "ollama": ("json_schema", None, set()),
    "vllm": ("json_schema", 2048, set()),
    "lmstudio": ("json_schema", 2048, {"json_object_schema", "tools"}),
}


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in (
        "TRADEGRAPH_LLM",
        "TRADEGRAPH_QUICK_MODEL",
        "TRADEGRAPH_DEEP_MODEL",
        "TRADEGRAPH_STRUCTURED_METHOD",
        "TRADEGRAPH_LLM_RETRIES",
        "MONGODB_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "local-model")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "local-model")
    monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
    return monkeypatch


@pytest.mark.parametrize("flavour", sorted(EXPECTED))
def test_check_finds_the_method_each_server_takes_and_runs_use_it(flavour, env, capsys, tmp_path):
    method, window, refused = EXPECTED[flavour]
    with FakeCompat(flavour, n_ctx=2048) as fake:
        env.setenv("OPENAI_BASE_URL", fake.base_url)
        assert main(["models", "check"]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        print(out)
        assert f"runs use: {method}" in out
        assert f"context window: {window if window else 'unknown'}" in out
        for m in refused:
            assert any(line.strip().startswith(m) and "refused" in line for line in out.splitlines()), (m, out)
        profile = json.loads((tmp_path / "home" / "model_profiles.json").read_text())
        (entry,) = profile.values()
        assert entry["structured_method"] == method and entry["models"] == ["local-model"]
        assert all(r["latency_s"] >= 0 for r in entry["methods"].values())
        # a run uses the profile's method: every JSON pass asks the way the server takes
        fake.requests.clear()
        db = f"mongomock://mc_{uuid.uuid4().hex[:8]}"
        assert main([*RUN, "--db", db]) == 0, capsys.readouterr().err
        kinds = {(b.get("response_format") or {}).get("type") for b in fake.requests if b.get("response_format")}
        assert kinds == {"json_object" if method == "json_object_schema" else "json_schema"}
        if method == "json_object_schema":
            assert all("schema" in b["response_format"] for b in fake.requests if b.get("response_format"))


def test_a_refused_method_is_one_line_and_not_retried(env, capsys):
    """llama.cpp's 500 to json_schema, asked for explicitly: one request, one line with the server's words (four
    attempts before: the 500 was retried as a server error)."""
    with FakeCompat("llama_cpp") as fake:
        env.setenv("OPENAI_BASE_URL", fake.base_url)
        env.setenv("TRADEGRAPH_STRUCTURED_METHOD", "json_schema")
        db = f"mongomock://mc_{uuid.uuid4().hex[:8]}"
        code = main([*RUN, "--db", db])
        capsys.readouterr()
        schema_requests = [b for b in fake.requests if (b.get("response_format") or {}).get("type") == "json_schema"]
        assert code != 0 and len(schema_requests) == 1, (code, len(schema_requests))
    from database.connection import connect

    store = connect(db)
    (session,) = store.events.sessions()
    errors = [
        e["payload"]
        for e in store.events.read(session["session_id"] if isinstance(session, dict) else session, kind="error")
    ]
    said = [e for e in errors if "Input should be 'text' or 'json_object'" in json.dumps(e)]
    assert said and "not retried" in json.dumps(said[0]) and "models check" in json.dumps(said[0])


def test_a_model_the_server_does_not_list_is_exit_2(env, capsys):
    with FakeCompat("vllm") as fake:
        env.setenv("OPENAI_BASE_URL", fake.base_url)
        assert main(["models", "check", "--model", "other-model"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "model 'other-model' is not one" in err and "local-model" in err
        # once checked, a run naming a model the server did not list stops before any request
        assert main(["models", "check"]) == 0
        capsys.readouterr()
        sent = len(fake.requests)
        env.setenv("TRADEGRAPH_DEEP_MODEL", "other-model")
        assert main([*RUN, "--db", f"mongomock://mc_{uuid.uuid4().hex[:8]}"]) == 2
        err = capsys.readouterr().err
        assert "TRADEGRAPH_DEEP_MODEL: model 'other-model' is not one" in err and len(fake.requests) == sent


def test_a_prompt_past_the_checked_window_is_refused_before_sending(env, capsys):
    """A window of 450 tokens (found by the server's refusal of an oversized prompt): the first state whose prompt
    can't fit is refused naming the state, its size and the window, and no such request reaches the server (before,
    each went out and came back a 400)."""
    with FakeCompat("llama_cpp", n_ctx=450) as fake:
        env.setenv("OPENAI_BASE_URL", fake.base_url)
        assert main(["models", "check"]) == 0
        assert "context window: 450" in capsys.readouterr().out
        fake.requests.clear()
        db = f"mongomock://mc_{uuid.uuid4().hex[:8]}"
        assert main([*RUN, "--db", db]) != 0
        capsys.readouterr()
        sent = list(fake.requests)
        assert 400 not in fake.statuses[-len(sent) :] if sent else True
    from database.connection import connect

    store = connect(db)
    (session,) = store.events.sessions()
    sid = session["session_id"] if isinstance(session, dict) else session
    refused = [e for e in store.events.read(sid, kind="error") if e["payload"].get("type") == "context_window_exceeded"]
    assert refused, "no refusal recorded"
    p = refused[0]["payload"]
    assert p["context_window"] == 450 and p["prompt_tokens"] > 450 - 64
    assert p["message"].startswith(f"{refused[0]['state']}: a prompt of ~{p['prompt_tokens']} tokens does not fit")
    # every request that was sent fitted: prompt estimate + its cap within the window
    assert all(b["max_tokens"] <= 450 for b in sent)
