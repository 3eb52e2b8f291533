"""Where spans go: the OTLP/HTTP traces URL from a flag or the standard OpenTelemetry variables.

Standard library only, so the runner can ask whether export is configured without importing the SDK.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Optional
from urllib.parse import urlsplit

ENDPOINT_VAR = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_VAR = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
TIMEOUT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
TRACES_PATH = "v1/traces"


class OtelConfigError(ValueError):
    """The endpoint or protocol setting is unusable: the message names the setting and its value."""


def _env(env: Mapping[str, str], name: str) -> Optional[str]:
    # the OpenTelemetry configuration spec: an empty variable counts as unset
    value = (env.get(name) or "").strip()
    return value or None


def configured(env: Mapping[str, str] = os.environ) -> bool:
    """An endpoint variable is set and the SDK is not disabled (OTEL_SDK_DISABLED=true)."""
    if (_env(env, "OTEL_SDK_DISABLED") or "").lower() == "true":
        return False
    return bool(_env(env, TRACES_ENDPOINT_VAR) or _env(env, ENDPOINT_VAR))


def traces_url(endpoint: Optional[str] = None, env: Mapping[str, str] = os.environ) -> Optional[str]:
    """The traces URL: `endpoint` (a base URL, or one already ending in /v1/traces), else
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (as the OTLP
    exporter spec resolves them). None when none is given."""
    if endpoint is not None:
        return _checked(
            "--endpoint", endpoint, signal_path=not urlsplit(endpoint).path.rstrip("/").endswith("/" + TRACES_PATH)
        )
    for name in PROTOCOL_VARS:
        protocol = _env(env, name)
        if protocol is not None and protocol != "http/protobuf":
            raise OtelConfigError(f"{name}={protocol!r}: tradegraph exports OTLP over HTTP only (http/protobuf)")
    for name in TIMEOUT_VARS:
        _check_timeout(name, _env(env, name))
    if traces := _env(env, TRACES_ENDPOINT_VAR):
        return _checked(TRACES_ENDPOINT_VAR, traces, signal_path=False)
    if base := _env(env, ENDPOINT_VAR):
        return _checked(ENDPOINT_VAR, base, signal_path=True)
    return None


def _check_timeout(name: str, value: Optional[str]) -> None:
    # the SDK reads seconds and falls back to 10 s on a value it cannot parse, with only a log warning: refused here
    if value is None:
        return
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not (seconds > 0 and seconds != float("inf")):
        raise OtelConfigError(f"{name}={value!r} is not a positive number of seconds")


def _checked(source: str, url: str, *, signal_path: bool) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OtelConfigError(f"{source}={shown(url)!r} is not an http:// or https:// URL")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise OtelConfigError(f"{source}={shown(url)!r} has a port that is not a number") from None
    if signal_path:
        return url.rstrip("/") + "/" + TRACES_PATH
    return url


def shown(url: str) -> str:
    """The URL without any user:password, as it may be printed, logged or audited."""
    return re.sub(r"//[^/@]*@", "//", url, count=1)
