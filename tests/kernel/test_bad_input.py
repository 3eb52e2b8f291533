"""Bad input generated from the OpenAPI schema (schemathesis, positive and negative modes) against the app
on the embedded store: no case may get a 5xx, and every refusal has the kernel's one-line error body.
The only 5xx allowed is a real store outage, shown separately: the server stopped, the API answers 503.

Run with -s to see the figures (cases per status) that docs/benchmarks.md quotes: one test per operation and
generation mode, so the ~1,500 cases spread over parallel workers."""

from __future__ import annotations

import collections
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from graph.kernel import Kernel
from graph.kernel.capabilities import CAPABILITIES
from graph.transports.http import create_app

pytestmark = pytest.mark.integration
# per operation and mode: 30 since 60 cost the suite ~2 min of CPU (generating negative cases is most of it); the
# cases are derandomized, so each run sends the same ones
EXAMPLES = 30
# valid with every field left out (StockBench's whole protocol): a positive case runs the benchmark, or its dry run,
# for real (minutes of CPU each), so these are sent invalid cases only; tests/integration/test_benchmark_stockbench.py
# runs them on short windows
WHOLE_PROTOCOL = {"POST /benchmarks/stockbench", "POST /benchmarks/stockbench/estimate"}
# a valid sweep starts a Ray instance and runs its episodes in the app's process, for minutes after the 202 (one case
# alone outran the 300 s test timeout): sent invalid cases only; tests/integration/test_sweep.py and
# tests/kernel/test_parity.py start valid sweeps over the CLI and HTTP
STARTS_RAY = {"POST /sweeps"}


@pytest.fixture(scope="module")
def app(embedded_uri, tmp_path_factory):
    k = Kernel.open(
        f"{embedded_uri}/kbad_{uuid.uuid4().hex[:8]}", env={}, experiments_dir=tmp_path_factory.mktemp("kbad") / "exp"
    )
    # one real session and task to aim at, so generated ids are not all unknown
    k.call("run_cycle", {"symbols": ["AAPL"], "as_of": "2012-06-01", "memory": "off"})
    yield create_app(k)
    k.close()


# every operation of the API: one per capability, and the two routes that are not (an artifact's bytes, a task's
# event stream); each with each generation mode is a test of its own, so parallel workers share them out
OPERATIONS = sorted([*CAPABILITIES, "task_artifact_file", "task_events"])


@pytest.fixture(scope="module")
def schema(app):
    import schemathesis

    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_no_generated_request_gets_a_5xx(schema, operation, mode):
    from schemathesis.generation import GenerationMode

    op = schema.find_operation_by_id(operation)
    if mode == "positive" and op.label in WHOLE_PROTOCOL | STARTS_RAY:
        pytest.skip(
            f"{op.label}: a valid case runs StockBench's whole protocol or a sweep on Ray (sent invalid cases only)"
        )
    statuses: collections.Counter = collections.Counter()
    failures = []

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(case=op.as_strategy(generation_mode=GenerationMode(mode)))
    def run(case):
        response = case.call()
        statuses[response.status_code] += 1
        if response.status_code >= 500:
            failures.append((op.label, mode, response.status_code, response.text[:300]))
        elif response.status_code >= 400:
            body = response.json()
            assert set(body) == {"error", "message", "field"}, (op.label, body)
            assert body["message"] and "\n" not in body["message"], (op.label, body)

    try:
        run()
    except Unsatisfiable:
        # an operation without parameters (GET /store) has nothing to make invalid
        assert mode == "negative", op.label
        return
    print(f"\n{op.label} {mode}: {sum(statuses.values())} cases, statuses {dict(sorted(statuses.items()))}")
    assert not failures, failures[:5]
    assert statuses, op.label  # it really ran
    if mode == "negative":  # and what it sent was refused as bad input somewhere, not answered as valid throughout
        assert any(400 <= s < 500 for s in statuses), (op.label, statuses)


def test_a_real_store_outage_is_the_only_5xx(tmp_path):
    from fastapi.testclient import TestClient

    from database.embedded import start_server, stop_server

    home = tmp_path / "nx"
    port, _ = start_server(home)
    k = Kernel.open(f"mongodb://127.0.0.1:{port}/outage", env={}, experiments_dir=tmp_path / "exp")
    client = TestClient(create_app(k))
    try:
        assert client.get("/sessions").status_code == 200
        stop_server(home)
        r = client.get("/sessions")
        assert r.status_code == 503 and r.json()["error"] == "store_unavailable"
        assert "\n" not in r.json()["message"]
        store = client.get("/store")  # reporting the outage is not itself an outage
        assert store.status_code == 200 and store.json()["ok"] is False
    finally:
        k.close()
        stop_server(home)
