"""Every environment variable tradegraph reads is checked at start-up, on every command: a bad value stops the
command with exit 2 and ONE line naming the variable and the value, before anything is opened or written.

The list of variables is read from the source (every "TRADEGRAPH_…", "OTEL_…", provider key and endpoint name),
so a variable added without a bad-value case here fails `test_every_variable_read_has_a_bad_value_case`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agent.config import AgentConfig, ConfigError, check_environment
from agent.providers import PROVIDERS
from database.connection import connect
from graph.transports.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "--symbols", "AAPL", "--as-of", "2012-06-01"]
KEYS = {
    "OPENAI_API_KEY": "openai",
    "ANTHROPIC_API_KEY": "anthropic",
    "GOOGLE_API_KEY": "google_genai",
    "GEMINI_API_KEY": "google_genai",
}
A_FILE = str(ROOT / "pyproject.toml")

# variable -> (a bad value, the other variables that make it read)
BAD: dict[str, tuple[str, dict[str, str]]] = {
    "TRADEGRAPH_LLM": ("gpt4", {}),
    "TRADEGRAPH_QUICK_MODEL": ("anthropic:", {}),
    "TRADEGRAPH_DEEP_MODEL": ("ollama:", {}),
    "TRADEGRAPH_STRUCTURED_METHOD": ("xml", {}),
    "TRADEGRAPH_TOOL_CHOICE": ("maybe", {}),
    "TRADEGRAPH_MAX_RETRIES": ("two", {}),
    "TRADEGRAPH_MAX_TOOL_STEPS": ("0", {}),
    "TRADEGRAPH_STARTING_CASH": ("1e99", {}),
    "TRADEGRAPH_FEES_BPS": ("-5", {}),
    "TRADEGRAPH_SLIPPAGE_BPS": ("nan", {}),
    "TRADEGRAPH_TOKEN_BUDGET": ("-1", {}),
    "TRADEGRAPH_MAX_TOKENS": ("many", {}),
    "TRADEGRAPH_MAX_COST": ("-0.5", {}),
    "TRADEGRAPH_MAX_LLM_CALLS": ("2.5", {}),
    "TRADEGRAPH_MAX_OUTPUT_TOKENS": ("8", {}),
    "TRADEGRAPH_LLM_CACHE": ("sometimes", {}),
    "TRADEGRAPH_PRICES": ("/nonexistent/prices.toml", {}),
    "TRADEGRAPH_LLM_RETRIES": ("11", {}),
    "TRADEGRAPH_LLM_BACKOFF_S": ("soon", {}),
    "TRADEGRAPH_LLM_JITTER": ("1.5", {}),
    "TRADEGRAPH_LLM_MAX_WAIT_S": ("inf", {}),
    "TRADEGRAPH_LLM_TIMEOUT": ("0", {}),
    "TRADEGRAPH_LLM_CONCURRENCY": ("lots", {}),
    "TRADEGRAPH_MEMORY": ("always", {}),
    "TRADEGRAPH_DECIDE_AT": ("noon", {}),
    "TRADEGRAPH_MEMORY_TOP_K": ("100", {}),
    "TRADEGRAPH_RISK_LIMITS": ("/nonexistent/limits.toml", {}),
    "TRADEGRAPH_HOME": (A_FILE, {}),
    "TRADEGRAPH_DEBUG": ("0", {}),
    "TRADEGRAPH_API_TOKEN": ("   ", {}),
    "TRADEGRAPH_AUDIT_KEY": ("  ", {}),
    "TRADEGRAPH_ALLOW_EXECUTION": ("ftp", {}),
    "TRADEGRAPH_ALLOW_DELETE": ("smtp", {}),
    "TRADEGRAPH_DATA_DIRS": ("/nonexistent/data", {}),
    "TRADEGRAPH_ALLOWED_HOSTS": ("http://evil.example", {}),
    "TRADEGRAPH_RUNS_DIR": (A_FILE, {}),
    "TRADEGRAPH_CONFIG": ("/nonexistent/tradegraph.toml", {}),
    "MONGODB_URI": ("redis://localhost:6379", {}),
    "TRADEGRAPH_BROKER": ("ibkr", {}),
    "TRADEGRAPH_MANDATE": ("/nonexistent/mandate.toml", {}),
    "TRADEGRAPH_BROKER_FILL_WAIT_S": ("soon", {}),
    "ALPACA_BASE_URL": ("https://api.alpaca.markets", {}),
    "ALPACA_API_KEY": ("  ", {"TRADEGRAPH_BROKER": "alpaca", "ALPACA_SECRET_KEY": "s"}),
    "OPENAI_BASE_URL": ("ftp://models.example", {"TRADEGRAPH_LLM": "openai", "OPENAI_API_KEY": "k"}),
    "ANTHROPIC_BASE_URL": (
        "ftp://models.example",
        {
            "TRADEGRAPH_LLM": "anthropic",
            "ANTHROPIC_API_KEY": "k",
            "TRADEGRAPH_QUICK_MODEL": "m",
            "TRADEGRAPH_DEEP_MODEL": "m",
        },
    ),
    "ANTHROPIC_API_URL": (
        "http://host:port",
        {
            "TRADEGRAPH_LLM": "anthropic",
            "ANTHROPIC_API_KEY": "k",
            "TRADEGRAPH_QUICK_MODEL": "m",
            "TRADEGRAPH_DEEP_MODEL": "m",
        },
    ),
    "GOOGLE_GEMINI_BASE_URL": (
        "gopher://g",
        {
            "TRADEGRAPH_LLM": "google_genai",
            "GOOGLE_API_KEY": "k",
            "TRADEGRAPH_QUICK_MODEL": "m",
            "TRADEGRAPH_DEEP_MODEL": "m",
        },
    ),
    "GOOGLE_GENAI_USE_VERTEXAI": (
        "true",
        {
            "TRADEGRAPH_LLM": "google_genai",
            "GOOGLE_API_KEY": "k",
            "TRADEGRAPH_QUICK_MODEL": "m",
            "TRADEGRAPH_DEEP_MODEL": "m",
        },
    ),
    "OLLAMA_HOST": ("localhost:abc", {"TRADEGRAPH_QUICK_MODEL": "ollama:m", "TRADEGRAPH_DEEP_MODEL": "ollama:m"}),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("ftp://collector", {}),
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ("collector:4318", {}),
    "OTEL_EXPORTER_OTLP_PROTOCOL": ("grpc", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}),
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": ("http/json", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}),
    "OTEL_EXPORTER_OTLP_TIMEOUT": ("ten", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}),
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": ("-1", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}),
}
# read, but any value is a valid one: no bad value to test (the reason stands next to each)
ANY_VALUE = {
    "OTEL_SDK_DISABLED": "only 'true' disables the SDK, per the OpenTelemetry spec; anything else leaves it on",
    "OTEL_SERVICE_NAME": "a free-form name",
    "OTEL_RESOURCE_ATTRIBUTES": "parsed leniently by the OpenTelemetry SDK itself",
}
ALL_VARS = set(BAD) | set(KEYS) | set(ANY_VALUE)


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for name in ALL_VARS | {"OTEL_SDK_DISABLED"}:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./tradegraph.toml from the checkout


def store_uri() -> str:
    return f"mongomock://cfg_{uuid.uuid4().hex[:10]}"


def sessions_in(uri: str) -> list:
    store = connect(uri)
    try:
        return store.events.sessions()
    finally:
        store.close()


def source_variables() -> set[str]:
    """Every variable name the code reads: string literals of the usual shapes, and the providers' table."""
    pattern = re.compile(
        r"""["'$]((?:TRADEGRAPH|OTEL)_[A-Z0-9_]+|[A-Z]+_API_KEY|[A-Z]+_(?:BASE|API)_URL|MONGODB_URI|"""
        r"""OLLAMA_HOST|GOOGLE_GENAI_[A-Z_]+)\b"""
    )
    found = set()
    for folder in ("agent", "database", "graph", "schemas", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= set(pattern.findall(path.read_text()))
    for p in PROVIDERS.values():
        found |= set(p.key_vars) | set(p.url_vars)
    return found


def test_every_variable_read_has_a_bad_value_case():
    missing = source_variables() - ALL_VARS
    assert not missing, f"variables read but not checked here: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_exit_2_and_one_line_naming_it(name, monkeypatch, capsys):
    value, others = BAD[name]
    for k, v in others.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(name, value)
    uri = store_uri()
    assert main([*RUN, "--db", uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert name in err and value.strip() in err, err
    assert sessions_in(uri) == []
    # and unset, the same command starts (it is this variable that stopped it)
    monkeypatch.delenv(name)
    check_environment()


def test_a_command_reading_no_configuration_is_checked_too(monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_FEES_BPS", "-5")
    assert main(["sessions", "--db", store_uri()]) == 2
    assert "TRADEGRAPH_FEES_BPS='-5'" in capsys.readouterr().err


def test_a_short_audit_key_is_refused_without_showing_it(monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", "hunter2")
    uri = store_uri()
    assert main([*RUN, "--db", uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TRADEGRAPH_AUDIT_KEY is 7 byte(s) long" in err and "hunter2" not in err, err
    assert sessions_in(uri) == []
    monkeypatch.setenv("TRADEGRAPH_AUDIT_KEY", "hunter2-hunter2-hunter2")
    check_environment()


def test_help_needs_no_configuration(monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_FEES_BPS", "-5")
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0 and "--symbols" in capsys.readouterr().out


@pytest.mark.parametrize("key,provider", sorted(KEYS.items()))
def test_a_missing_key_is_exit_2_naming_it_before_any_session(key, provider, monkeypatch, capsys):
    models = {} if provider == "openai" else {"TRADEGRAPH_QUICK_MODEL": "m", "TRADEGRAPH_DEEP_MODEL": "m"}
    for k, v in models.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TRADEGRAPH_LLM", provider)
    monkeypatch.setenv(key, "  ")  # blank is unset
    uri = store_uri()
    assert main([*RUN, "--db", uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err and f"TRADEGRAPH_LLM='{provider}'" in err, err
    assert sessions_in(uri) == []


def test_a_missing_provider_package_names_the_extra(monkeypatch, capsys):
    import agent.providers

    real = agent.providers.importlib.util.find_spec
    monkeypatch.setattr(
        agent.providers.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "langchain_anthropic" else real(name, *a),
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "anthropic:claude-haiku-4-5")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "anthropic:claude-opus-4-5")
    uri = store_uri()
    assert main([*RUN, "--db", uri]) == 2
    err = capsys.readouterr().err
    assert err == (
        "tradegraph: error: TRADEGRAPH_QUICK_MODEL='anthropic:claude-haiku-4-5' needs the "
        "langchain_anthropic package: pip install 'tradegraph[anthropic]'\n"
    )
    assert sessions_in(uri) == []


def test_with_the_key_set_the_same_command_writes_its_session(monkeypatch, capsys):
    """The control for the two tests above: what stopped them was the key, not the command."""
    from tests.fakes.fake_anthropic import FakeAnthropic

    with FakeAnthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "anthropic:claude-haiku-4-5")
        monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "anthropic:claude-opus-4-5")
        uri = store_uri()
        assert main([*RUN, "--db", uri, "--json"]) == 0, capsys.readouterr().err
        assert len(sessions_in(uri)) == 1 and fake.requests


def test_the_installed_command_stops_before_writing(tmp_path):
    """The real entry point in its own process, on the embedded store: the three cases the issue names."""
    env = {k: v for k, v in os.environ.items() if k not in ALL_VARS}
    env.update(TRADEGRAPH_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))

    def tg(*args, **extra):
        return subprocess.run(
            [sys.executable, "-m", "graph.transports.cli.main", *args],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )

    cash = tg(*RUN, TRADEGRAPH_STARTING_CASH="1e99")
    assert (cash.returncode, cash.stderr) == (
        2,
        "tradegraph: error: TRADEGRAPH_STARTING_CASH='1e99' is outside 0.01..1e+12\n",
    )
    for command in (RUN, ["backtest", "--symbols", "AAPL", "--start", "2012-06-01", "--end", "2012-06-08"]):
        fees = tg(*command, TRADEGRAPH_FEES_BPS="-5")
        assert (fees.returncode, fees.stderr) == (
            2,
            "tradegraph: error: TRADEGRAPH_FEES_BPS='-5' is outside 0..1000\n",
        ), command
    no_key = tg(*RUN, TRADEGRAPH_LLM="openai")
    assert (no_key.returncode, no_key.stderr) == (
        2,
        "tradegraph: error: TRADEGRAPH_LLM='openai' needs OPENAI_API_KEY to be set\n",
    )
    # nothing was started or written: the embedded store's home was never even created
    assert not (tmp_path / "home").exists()


# ---------------------------------------------------------------------------- the configuration's own rules
def test_a_tier_named_with_its_provider_needs_the_other_tier_named_too(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "anthropic:claude-haiku-4-5")
    with pytest.raises(ConfigError, match=r"^TRADEGRAPH_DEEP_MODEL is unset and anthropic has no default model"):
        AgentConfig.from_env()
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "claude-opus-4-5")  # bare: the provider the quick tier named
    settings = AgentConfig.from_env()
    assert (settings.provider, settings.deep_model) == ("anthropic", "claude-opus-4-5")


def test_ollama_names_with_a_colon_stay_whole(monkeypatch):
    monkeypatch.setenv("TRADEGRAPH_LLM", "ollama")
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "qwen:7b")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "ollama:llama3.1:70b")
    from agent.providers import tier_model

    settings = AgentConfig.from_env()
    assert [(t.provider, t.model) for t in (tier_model(settings, "quick"), tier_model(settings, "deep"))] == [
        ("ollama", "qwen:7b"),
        ("ollama", "llama3.1:70b"),
    ]


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {
                "TRADEGRAPH_STRUCTURED_METHOD": "json_mode",
                "ANTHROPIC_API_KEY": "k",
                "TRADEGRAPH_LLM": "anthropic",
                "TRADEGRAPH_QUICK_MODEL": "m",
                "TRADEGRAPH_DEEP_MODEL": "m",
            },
            "TRADEGRAPH_STRUCTURED_METHOD='json_mode' is not supported by anthropic",
        ),
        (
            {"TRADEGRAPH_STRUCTURED_METHOD": "function_calling"},
            "TRADEGRAPH_STRUCTURED_METHOD='function_calling' does not apply to the offline model",
        ),
        (
            {"TRADEGRAPH_TOOL_CHOICE": "on", "TRADEGRAPH_QUICK_MODEL": "ollama:m", "TRADEGRAPH_DEEP_MODEL": "ollama:m"},
            "TRADEGRAPH_TOOL_CHOICE='on': ollama has no tool_choice",
        ),
    ],
)
def test_a_setting_the_provider_cannot_honour_is_refused(env, message, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=re.escape(message)):
        AgentConfig.from_env()


@pytest.mark.parametrize(
    "module,args",
    [
        ("graph.transports.serve_cli", ["serve", "--port", "0"]),
        ("graph.transports.serve_cli", ["mcp"]),
        ("graph.transports.mcp", []),
    ],
)
def test_servers_started_on_their_own_check_first(module, args, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ALL_VARS}
    env.update(TRADEGRAPH_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), TRADEGRAPH_LLM_JITTER="2")
    r = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (r.returncode, r.stderr) == (2, "tradegraph: error: TRADEGRAPH_LLM_JITTER='2' is outside 0..1\n")
    assert not (tmp_path / "home").exists()
