"""The schema a model is shown carries every constraint the validator enforces (issue 31): walking every contract,
each pattern, string length, enum and numeric bound in the contract's JSON Schema is in the schema sent under the
current pass protocol (protocol 4 left out lengths and patterns: a Plan's ticker pattern, AgentMemory.as_of's date
pattern). Only the fields code sets (MODEL_SETS) are left out, and none of them is required."""

from __future__ import annotations

import json

import pytest

from agent.json_chat_model import lean_schema
from agent.passes import MODEL_SETS, PASS_PROTOCOL, _asked_response_format, asked_schema, json_instruction
from agent.protocols import version
from schemas import ALL_CONTRACTS

CONSTRAINTS = frozenset(
    {
        "pattern",
        "maxLength",
        "minLength",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "format",
        "required",
        "additionalProperties",
        "multipleOf",
    }
)


def constraints_of(node, path="") -> set[tuple[str, str, str]]:
    """(where, keyword, value) of every constraint in a JSON Schema, however deep."""
    found: set[tuple[str, str, str]] = set()
    if isinstance(node, list):
        for i, x in enumerate(node):
            found |= constraints_of(x, f"{path}[{i}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in CONSTRAINTS and not isinstance(value, dict):
                found.add((path, key, json.dumps(value, sort_keys=True)))
            elif key in ("properties", "$defs") and isinstance(value, dict):
                for name, sub in value.items():
                    found |= constraints_of(sub, f"{path}/{key}/{name}")
            else:
                found |= constraints_of(value, f"{path}/{key}")
    return found


def test_the_current_protocol_shows_constraints():
    assert version(PASS_PROTOCOL).shows_constraints


@pytest.mark.parametrize("name", sorted(ALL_CONTRACTS))
def test_every_constraint_the_contract_checks_is_in_the_schema_sent(name):
    contract = ALL_CONTRACTS[name]
    full = lean_schema(contract.model_json_schema())
    dropped = MODEL_SETS.get(name, ())
    sent = asked_schema(contract, True)
    # a definition only the dropped fields used goes with them (asked_schema drops $defs nothing sent refers to)
    unused = {f"/$defs/{d}" for d in full.get("$defs", {}) if f"#/$defs/{d}" not in json.dumps(sent)}
    expected = {
        c
        for c in constraints_of(full)
        if not any(c[0].startswith(f"/properties/{d}") for d in dropped)
        and not any(c[0] == u or c[0].startswith(u + "/") for u in unused)
    }
    missing = expected - constraints_of(sent)
    assert not missing, f"{name}: constraints the model is not shown: {sorted(missing)[:5]}"
    # and the response format of a json_schema request carries that schema
    assert _asked_response_format(contract, True)["json_schema"]["schema"] == sent


def test_the_two_the_issue_names():
    from schemas.memory import AgentMemory
    from schemas.plan import Plan

    plan = asked_schema(Plan, True)
    assert plan["properties"]["assets"]["items"]["pattern"] == "^[A-Z][A-Z0-9.\\-]{0,9}$"
    assert asked_schema(AgentMemory, True)["properties"]["as_of"]["pattern"] == r"^\d{4}-\d{2}-\d{2}$"
    # protocol 4, which a replay of its recordings still asks, left both out
    assert "pattern" not in asked_schema(Plan)["properties"]["assets"]["items"]
    # json_mode states the schema in the prompt: with its constraints too
    assert "^[A-Z][A-Z0-9.\\\\-]{0,9}$" in json_instruction(Plan, "json_mode", protocol=PASS_PROTOCOL).content


@pytest.mark.parametrize("name", sorted(ALL_CONTRACTS))
def test_the_grammar_bounded_schema_is_tighter_never_looser(name):
    """json_object_schema (llama.cpp) is sent grammar_bounded(schema): every constraint stays, lengths and list
    sizes at most the grammar's bounds and never above the contract's."""
    from agent.passes import GRAMMAR_CHARS, GRAMMAR_ITEMS, grammar_bounded, grammar_pattern

    sent = asked_schema(ALL_CONTRACTS[name], True)
    bounded = grammar_bounded(sent)
    # a pattern is kept as llama.cpp's parser reads it (\d as [0-9]: the same strings, tests/unit/test_call_schema.py)
    kept = {
        (w, k, json.dumps(grammar_pattern(json.loads(v))) if k == "pattern" else v)
        for w, k, v in constraints_of(sent)
        if k not in ("maxLength", "maxItems")
    }
    assert kept <= constraints_of(bounded)
    for where, key, value in constraints_of(bounded):
        if key == "maxLength":
            assert int(value) <= GRAMMAR_CHARS
        if key == "maxItems":
            assert int(value) <= GRAMMAR_ITEMS
        if key in ("maxLength", "maxItems") and (where, key) in {(w, k) for w, k, _ in constraints_of(sent)}:
            original = next(int(v) for w, k, v in constraints_of(sent) if (w, k) == (where, key))
            assert int(value) <= original
