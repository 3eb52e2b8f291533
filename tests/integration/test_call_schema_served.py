"""Per-call schemas on the wire (issue 31): a cycle against a fake answering as llama.cpp's server does
(tests/fakes/fake_compat.py), after `models check` chose json_object with a schema. Every JSON request's schema
names what its validator will hold the answer to (the symbol, the analyst's role, the debate side, the winner the
trader must follow, the bundle's indicator values, the cycle's universe); the honest answers the fake gave fit
those schemas, and the answers SmolLM2-135M gave on the real server (kept in the test) do not. And with the local
server's default concurrency of 1, no two requests are ever in flight at once, while parallel analysts still
run on threads."""

from __future__ import annotations

import json
import threading
import time
import uuid

import jsonschema
import pytest

from graph.transports.cli.main import main
from tests.fakes.fake_compat import FakeCompat

pytestmark = pytest.mark.integration

# what SmolLM2-135M-Instruct answered on llama.cpp's server before per-call schemas (the cycle kept in
# tests/fixtures/recordings until then): the technical analyst calling itself fundamental, and the quant
HOSTILE_TECHNICAL = {
    "symbol": "AAPL",
    "analyst": "fundamental",
    "stance": 1.0,
    "confidence": 0.93,
    "summary": "The AnalystNote is a technical analysis platform that provides users with the "
    "ability to analyze and make predictions based on data from various financial markets.",
    "key_points": ["AAPL", "FTSE-150", "S&P/CM", "MBS"],
}
HOSTILE_QUANT = {
    "symbol": "AAPL",
    "question": "planning",
    "answer": "10% increase in price of Apple stock by 1.5%, June 2, 2013",
}


class Counting(FakeCompat):
    """Also counts the requests in flight, each held a little so that overlapping ones would overlap here. A request
    leaves the count once its answer is made, before it is written: from then on the client may read it and send its
    next one while this handler's thread has not yet run again (counted after the write, a busy machine showed two
    in flight to a client that sends one at a time)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.in_flight = self.most_in_flight = 0
        self._count = threading.Lock()
        self._this = threading.local()  # whether this handler's request has left the count
        self.answered: list[tuple[dict, str]] = []  # (the request, the answer's text)

    def reply(self, body, asked, answer, fault):
        self.answered.append((body, str(answer.content)))
        out = super().reply(body, asked, answer, fault)
        self._leave()
        return out

    def _leave(self) -> None:
        if not self._this.left:
            self._this.left = True
            with self._count:
                self.in_flight -= 1

    def serve(self, handler, body: dict) -> None:
        self._this.left = False
        with self._count:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.02)
            super().serve(handler, body)
        finally:
            self._leave()  # an error answer, which no reply made


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in (
        "TRADEGRAPH_LLM",
        "TRADEGRAPH_STRUCTURED_METHOD",
        "TRADEGRAPH_LLM_RETRIES",
        "MONGODB_URI",
        "TRADEGRAPH_LLM_CONCURRENCY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRADEGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    monkeypatch.setenv("TRADEGRAPH_QUICK_MODEL", "local-model")
    monkeypatch.setenv("TRADEGRAPH_DEEP_MODEL", "local-model")
    monkeypatch.setenv("TRADEGRAPH_LLM_BACKOFF_S", "0.01")
    return monkeypatch


def _task(body: dict) -> str:
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
    return next((line[len("TASK: ") :] for line in text.splitlines() if line.startswith("TASK: ")), "")


PINNED = {"symbol", "analyst", "side", "direction", "metrics", "assets"}


def test_each_request_names_what_its_answer_is_held_to(env, capsys):
    with Counting("llama_cpp") as fake:
        env.setenv("OPENAI_BASE_URL", fake.base_url)
        assert main(["models", "check"]) == 0, capsys.readouterr().err
        capsys.readouterr()
        fake.requests.clear()
        fake.most_in_flight = 0
        db = f"mongomock://cs_{uuid.uuid4().hex[:8]}"
        assert main(["run", "--symbols", "AAPL,MSFT", "--as-of", "2012-06-01", "--json", "--db", db]) == 0, (
            capsys.readouterr().err
        )
        out = json.loads(capsys.readouterr().out)
        asked = [(b, a) for b, a in fake.answered if (b.get("response_format") or {}).get("type") == "json_object"]
        manifest_concurrency = None
        from database.connection import connect

        store = connect(db)
        manifest = next(e for e in store.events.read(out["session_id"]) if e["kind"] == "manifest")
        manifest_concurrency = {t: m.get("concurrency") for t, m in manifest["payload"]["models"].items()}

    assert out["status"] in ("completed", "pending_approval"), out
    # the local server's default: one request at a time, recorded in the manifest
    assert fake.most_in_flight == 1
    assert set(manifest_concurrency.values()) == {1}
    seen: dict[str, int] = {}
    for body, answer in asked:
        schema, task = body["response_format"]["schema"], _task(body)
        # the honest answer fits what the schema pins (the text patterns are tighter than the guards: the offline
        # model cites its own subscores, which a pattern cannot name, and the grammar's bounds cut its lists;
        # tests/unit/test_call_schema.py checks that every string a pattern admits passes the guards)
        honest = json.loads(answer)
        for name in PINNED & set(honest) & set(schema["properties"]):
            jsonschema.validate(honest[name], schema["properties"][name])
        props = schema["properties"]
        role = task.split(":", 1)[1] if ":" in task else None
        if task.startswith(("analyst:", "critique:")):
            assert props["analyst"]["const"] == role
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(HOSTILE_TECHNICAL, schema)
        if task in ("bull_build", "bull_rebuttal", "bear_build", "bear_rebuttal"):
            assert props["side"]["const"] == task.split("_")[0]
        if task == "trader":
            assert props["direction"]["const"] in ("LONG", "SHORT")
            # the ATR-anchored levels code sets anyway: no price the thesis refuses can be written
            assert (
                0 < props["stop"]["const"] < props["entry"]["const"] < props["target"]["const"]
                or props["direction"]["const"] == "SHORT"
            )
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(-1.36885, props["target"])  # SmolLM2's target in the window
        if task == "quant":
            assert props["metrics"]["additionalProperties"] is False
            assert props["metrics"]["properties"]["rsi14"]["const"] == pytest.approx(
                props["metrics"]["properties"]["rsi14"]["const"]
            )
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(HOSTILE_QUANT, schema)
        if task == "planning" or "assets" in props:  # distinct symbols of the universe: its ordered subsets
            assert [a["const"] for a in props["assets"]["anyOf"]] == [["AAPL"], ["MSFT"], ["AAPL", "MSFT"]]
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(["MSFT", "MSFT"], props["assets"])  # what SmolLM2 wrote in the window
        if "symbol" in props and task != "planning":
            assert props["symbol"]["const"] in ("AAPL", "MSFT")
            # two symbols in the cycle: the other one cannot be written in any free text
            other = "MSFT" if props["symbol"]["const"] == "AAPL" else "AAPL"
            for name, prop in props.items():
                if prop.get("type") == "string" and "pattern" in prop and name != "symbol":
                    assert not jsonschema.Draft202012Validator({"type": "string", "pattern": prop["pattern"]}).is_valid(
                        f"buy {other} now"
                    )
        seen[task.split(":")[0]] = seen.get(task.split(":")[0], 0) + 1
    assert {"analyst", "quant", "planning", "trader"} <= set(seen), seen
