"""Which broker a run uses, and the Alpaca account it reaches: read from the environment, checked before anything
runs (a bad value is exit 2 before any model call).

TRADEGRAPH_BROKER=sim|alpaca (default sim); ALPACA_API_KEY, ALPACA_SECRET_KEY; ALPACA_BASE_URL (default Alpaca's
paper host; another host is a proxy or a local fake); TRADEGRAPH_MANDATE, the mandate's TOML (agent/brokers/
mandate.py; default: the built-in mandate). Paper only: the live trading host is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlparse

from agent.brokers import BrokerConfigError

BROKERS = ("sim", "alpaca")
PAPER_URL = "https://paper-api.alpaca.markets"
LIVE_HOST = "api.alpaca.markets"


@dataclass(frozen=True)
class AlpacaSettings:
    api_key: str
    secret_key: str
    base_url: str
    mandate_path: Optional[str] = None

    @property
    def host(self) -> str:
        return urlparse(self.base_url).netloc


def broker_name(env: Optional[Mapping[str, str]] = None, given: Optional[str] = None) -> str:
    env = os.environ if env is None else env
    name = (given or env.get("TRADEGRAPH_BROKER") or "sim").strip().lower()
    if name not in BROKERS:
        where = "--broker" if given else "TRADEGRAPH_BROKER"
        raise BrokerConfigError(f"{where}={name!r} is not a broker: expected one of {', '.join(BROKERS)}")
    return name


def check_base_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/") or parsed.query:
        raise BrokerConfigError(f"ALPACA_BASE_URL={url!r} is not a base URL (expected e.g. {PAPER_URL})")
    if parsed.hostname.lower() == LIVE_HOST:
        raise BrokerConfigError(
            f"ALPACA_BASE_URL={url!r} is Alpaca's live trading host: tradegraph trades paper only ({PAPER_URL})"
        )
    return url.rstrip("/")


def alpaca_settings(env: Optional[Mapping[str, str]] = None) -> AlpacaSettings:
    env = os.environ if env is None else env
    missing = [k for k in ("ALPACA_API_KEY", "ALPACA_SECRET_KEY") if not env.get(k, "").strip()]
    if missing:
        raise BrokerConfigError(f"the alpaca broker needs {' and '.join(missing)} (a paper account's keys)")
    return AlpacaSettings(
        env["ALPACA_API_KEY"].strip(),
        env["ALPACA_SECRET_KEY"].strip(),
        check_base_url(env.get("ALPACA_BASE_URL", "").strip() or PAPER_URL),
        env.get("TRADEGRAPH_MANDATE") or None,
    )


def check_broker_env(env: Optional[Mapping[str, str]] = None, given: Optional[str] = None) -> str:
    """The broker a run will use, its settings and mandate checked now: raises BrokerConfigError."""
    name = broker_name(env, given)
    if name == "alpaca":
        from agent.brokers.mandate import load_mandate

        settings = alpaca_settings(env)
        load_mandate(settings.mandate_path)
        try:
            import alpaca  # noqa: F401 - the optional extra
        except ImportError:
            raise BrokerConfigError("the alpaca broker needs alpaca-py: pip install 'tradegraph[broker]'") from None
    return name


FILL_WAIT_ENV = "TRADEGRAPH_BROKER_FILL_WAIT_S"


def fill_wait_s(env: Optional[Mapping[str, str]] = None) -> float:
    """How long EXECUTING waits for submitted orders to fill before it reports them open (default 5 s)."""
    env = os.environ if env is None else env
    raw = env.get(FILL_WAIT_ENV)
    if raw is None or raw == "":
        return 5.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise BrokerConfigError(f"{FILL_WAIT_ENV}={raw!r}: expected seconds from 0 to 3600")
    return value


def check_broker_startup(env: Mapping[str, str]) -> None:
    """Every command's start-up check (graph/transports/serve_cli.py startup_error): the broker variables that are
    set are valid, and a configured alpaca broker has its keys and mandate."""
    if env.get("ALPACA_BASE_URL", "").strip():
        check_base_url(env["ALPACA_BASE_URL"].strip())
    if env.get("TRADEGRAPH_MANDATE"):
        from agent.brokers.mandate import load_mandate

        load_mandate(env["TRADEGRAPH_MANDATE"])
    fill_wait_s(env)
    check_broker_env(env)
