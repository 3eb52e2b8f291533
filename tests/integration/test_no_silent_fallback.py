"""No silent fallback to the offline model (issue 31): a configuration naming a model tradegraph cannot reach is
exit 2 and one line before any model call; the offline model answers only when it was chosen, under its own names.

Each case runs the CLI in process against a fake OpenAI server that counts requests: a refused configuration
sends it none, and a store that must stay empty stays empty."""

from __future__ import annotations

import uuid

import pytest

from database.connection import connect
from graph.transports.cli.main import main
from tests.fakes.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration  # a fake OpenAI server on loopback

RUN = ["run", "--symbols", "AAPL", "--as-of", "2012-06-01"]
VARS = (
    "TRADEGRAPH_LLM",
    "TRADEGRAPH_QUICK_MODEL",
    "TRADEGRAPH_DEEP_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "TRADEGRAPH_STRUCTURED_METHOD",
    "TRADEGRAPH_TOOL_CHOICE",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def sessions(uri: str) -> list:
    store = connect(uri)
    try:
        return store.events.sessions()
    finally:
        store.close()


def refused(monkeypatch, capsys, env: dict[str, str]) -> str:
    with FakeOpenAI() as fake:
        for k, v in env.items():
            monkeypatch.setenv(k, v.replace("{url}", fake.base_url))
        uri = f"mongomock://nofb_{uuid.uuid4().hex[:10]}"
        assert main([*RUN, "--db", uri]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert fake.requests == [] and sessions(uri) == []
    return err


def test_an_unknown_provider_prefix_is_refused_not_run_offline(monkeypatch, capsys):
    err = refused(monkeypatch, capsys, {"TRADEGRAPH_QUICK_MODEL": "bogus:model"})
    assert "TRADEGRAPH_QUICK_MODEL='bogus:model': 'bogus' is not a provider" in err, err


def test_a_provider_model_with_no_provider_configured_is_refused(monkeypatch, capsys):
    err = refused(monkeypatch, capsys, {"TRADEGRAPH_DEEP_MODEL": "gpt-4o"})
    assert "TRADEGRAPH_DEEP_MODEL='gpt-4o': the offline model is offline-quick or offline-deep" in err, err


def test_a_base_url_without_a_key_is_refused_naming_the_url(monkeypatch, capsys):
    err = refused(monkeypatch, capsys, {"OPENAI_BASE_URL": "{url}", "TRADEGRAPH_QUICK_MODEL": "smollm2"})
    assert "OPENAI_BASE_URL='http://127.0.0.1:" in err and "needs OPENAI_API_KEY to be set" in err, err


@pytest.mark.parametrize("url", ["not a url", "http://two words/v1", "ftp://host/v1"])
def test_a_base_url_that_is_not_a_url_is_refused(url, monkeypatch, capsys):
    err = refused(monkeypatch, capsys, {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "k"})
    assert err == f"tradegraph: error: OPENAI_BASE_URL={url!r} is not an http(s) URL\n"


def test_a_base_url_and_a_key_run_the_named_model_not_the_offline_one(monkeypatch, capsys):
    """The control: with the key set, the same base URL sends the requests to that server, labelled with the
    model it was asked for (before the fix, OPENAI_BASE_URL without TRADEGRAPH_LLM still ran offline)."""
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "local")
        monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "smollm2")
        monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "smollm2")
        uri = f"mongomock://nofb_{uuid.uuid4().hex[:10]}"
        assert main([*RUN, "--db", uri, "--json"]) == 0, capsys.readouterr().err
        assert fake.requests and {r["model"] for r in fake.requests} == {"smollm2"}


@pytest.mark.parametrize(
    "env", [{}, {"TRADEGRAPH_LLM": "offline"}, {"TRADEGRAPH_QUICK_MODEL": "offline:offline-quick"}]
)
def test_the_offline_model_runs_when_chosen(env, monkeypatch, capsys):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main([*RUN, "--db", f"mongomock://nofb_{uuid.uuid4().hex[:10]}"]) == 0, capsys.readouterr().err
