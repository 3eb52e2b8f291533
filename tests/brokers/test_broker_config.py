"""Broker settings and the mandate: bad input is one line and exit 2 before any store or model is touched; the
mandate refuses in VALIDATING naming rule, limit and value; the manifest records the mandate's hash."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.brokers import BrokerConfigError
from agent.brokers.mandate import load_mandate
from agent.brokers.settings import alpaca_settings, check_broker_env
from graph.transports.cli.main import main
from tests.brokers.harness import guard_loopback, start_fake
from tests.fakes.fake_alpaca import KEY, SECRET

GOOD = {"ALPACA_API_KEY": KEY, "ALPACA_SECRET_KEY": SECRET, "ALPACA_BASE_URL": "http://127.0.0.1:1"}


@pytest.mark.parametrize(
    "env,needle",
    [
        ({"ALPACA_SECRET_KEY": "x"}, "ALPACA_API_KEY"),
        ({"ALPACA_API_KEY": "x"}, "ALPACA_SECRET_KEY"),
        ({**GOOD, "ALPACA_BASE_URL": "https://api.alpaca.markets"}, "live trading host"),
        ({**GOOD, "ALPACA_BASE_URL": "ftp://x"}, "not a base URL"),
        ({**GOOD, "ALPACA_BASE_URL": "https://paper-api.alpaca.markets/v2"}, "not a base URL"),
        ({**GOOD, "TRADEGRAPH_BROKER": "ibkr"}, "not a broker"),
    ],
)
def test_bad_settings_are_refused_naming_them(env, needle):
    with pytest.raises(BrokerConfigError, match=needle):
        check_broker_env({"TRADEGRAPH_BROKER": "alpaca", **env})


def test_paper_host_by_default():
    assert (
        alpaca_settings({"ALPACA_API_KEY": "k", "ALPACA_SECRET_KEY": "s"}).base_url
        == "https://paper-api.alpaca.markets"
    )


def test_run_exits_2_before_any_model_call(monkeypatch, capsys, tmp_path):
    called = []
    monkeypatch.setattr("graph.transports.cli.cycle.kernel", lambda *a, **k: called.append(a))
    monkeypatch.setenv("ALPACA_API_KEY", KEY)
    code = main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--broker", "alpaca"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and called == [] and len(err.splitlines()) == 1 and "ALPACA_SECRET_KEY" in err
    monkeypatch.setenv("ALPACA_SECRET_KEY", SECRET)
    monkeypatch.setenv("ALPACA_BASE_URL", "https://api.alpaca.markets")
    assert main(["run", "--symbols", "AAPL", "--as-of", "2012-06-01", "--broker", "alpaca"]) == 2
    assert "live trading host" in capsys.readouterr().err and called == []


def test_backtest_refuses_a_broker(monkeypatch, capsys, tmp_path):
    for k, v in {"TRADEGRAPH_BROKER": "alpaca", "ALPACA_API_KEY": KEY, "ALPACA_SECRET_KEY": SECRET}.items():
        monkeypatch.setenv(k, v)
    code = main(
        ["backtest", "--symbols", "AAPL", "--start", "2012-06-01", "--end", "2012-06-05", "--out", str(tmp_path)]
    )
    assert code == 2 and "simulated book only" in capsys.readouterr().err


def test_every_command_checks_the_broker_settings(monkeypatch, capsys):
    monkeypatch.setenv("TRADEGRAPH_BROKER", "alpaca")  # no keys
    assert main(["sessions"]) == 2 and "ALPACA_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,needle",
    [
        ("max_order_notional = -1", "max_order_notional"),
        ("symbols = 'AAPL'", "symbols"),
        ("trading_hours = '16:00-09:30'", "trading_hours"),
        ("leverage = 2", "unknown key 'leverage'"),
        ("approval_required = 'no'", "approval_required"),
    ],
)
def test_bad_mandate_named(tmp_path, text, needle):
    p = tmp_path / "m.toml"
    p.write_text(text)
    with pytest.raises(BrokerConfigError, match=needle):
        load_mandate(str(p))


def test_mandate_refusals_name_rule_limit_value(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(
        'symbols = ["AAPL", "MSFT"]\nmax_order_notional = 1000\nmax_position_notional = 1500\n'
        'max_gross_exposure = 2000\nmax_orders_per_day = 2\ntrading_hours = "09:30-16:00"\n'
    )
    m = load_mandate(str(p))
    assert len(m.sha256) == 64 and m.approval_required is True
    noon = datetime(2026, 11, 27, 17, 0, tzinfo=UTC)  # 12:00 in New York
    got = m.check(
        [("AAPL", "BUY", 60), ("NVDA", "BUY", 1)], {"AAPL": 20.0, "NVDA": 50.0}, {"MSFT": 10}, orders_today=1, now=noon
    )
    rules = {(r.rule, r.symbol): (r.limit, r.value) for r in got}
    assert rules == {
        ("symbols", "NVDA"): (["AAPL", "MSFT"], "NVDA"),
        ("max_order_notional", "AAPL"): (1000, 1200.0),
        ("max_orders_per_day", None): (2, 3),
    }
    assert (
        m.check(
            [("AAPL", "BUY", 1)], {"AAPL": 20.0}, {}, orders_today=0, now=datetime(2026, 11, 27, 22, 0, tzinfo=UTC)
        )[0].rule
        == "trading_hours"
    )
    big = m.check(
        [("AAPL", "BUY", 46)], {"AAPL": 20.0, "MSFT": 100.0}, {"AAPL": 30, "MSFT": 10}, orders_today=0, now=noon
    )
    assert {r.rule for r in big} == {"max_position_notional", "max_gross_exposure"}


def test_a_cycle_refused_by_the_mandate_in_validating(monkeypatch, tmp_path):
    from graph.machine.runner import run_state_machine
    from tests.helpers import mock_store, services_with

    guard_loopback(monkeypatch)
    fake = start_fake()
    try:
        p = tmp_path / "m.toml"
        p.write_text(
            'symbols = ["MSFT"]\ntrading_hours = "00:00-23:59"\nmax_order_notional = 1e9\n'
            "max_position_notional = 1e9\nmax_gross_exposure = 1e9\n"
        )
        for k, v in {
            "ALPACA_API_KEY": KEY,
            "ALPACA_SECRET_KEY": SECRET,
            "ALPACA_BASE_URL": fake.url,
            "TRADEGRAPH_MANDATE": str(p),
        }.items():
            monkeypatch.setenv(k, v)
        store = mock_store()
        out = run_state_machine("AAPL,MSFT", "2012-06-01", store=store, services=services_with(), broker="alpaca")
        assert out.status == "rejected" and out.contracts["VALIDATING"]["passed"] is False
        refusals = [
            e["payload"]
            for e in store.events.read(out.session_id, kind="validation")
            if e["payload"].get("check") == "mandate"
        ]
        assert refusals and refusals[0]["rule"] == "symbols" and refusals[0]["value"] == "AAPL"
        manifest = store.events.read(out.session_id, kind="manifest")[0]["payload"]
        assert manifest["broker"]["mandate"]["sha256"] == load_mandate(str(p)).sha256
        assert fake.posts == {}
    finally:
        fake.stop()
