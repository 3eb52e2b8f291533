"""The output cap of every request a state sends (issue 31): `max_tokens` or the provider's name for it.

Without one a local server generates until its context is full (llama.cpp's server, a 135M model that never closes
its JSON object): the request runs into the client's timeout and is retried, four times over. Each state's default
is sized from the contracts it asks for: a generous answer, every field written, each string at its maxLength up to
STRING_CHARS and each list at its maxItems up to LIST_ITEMS (the contracts' bounds are storage limits: a Plan's
longest valid answer is ~36k tokens), at ~3 characters a token (JSON is denser than prose) with a quarter's margin,
between TOOL_ROUND_TOKENS (a tool round) and MAX_DEFAULT.

TRADEGRAPH_MAX_OUTPUT_TOKENS sets every state's cap; TRADEGRAPH_MAX_OUTPUT_TOKENS_<STATE> one state's (over the
first). The caps are AgentConfig.output_caps, so the run manifest records them, the budgets reserve them
(agent/budget.py output_cap reads the request's max_tokens) and `--estimate` prices its worst case with them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, Optional

from pydantic import BaseModel

from agent.env import ConfigError

CAP_VAR = "TRADEGRAPH_MAX_OUTPUT_TOKENS"
CAP_RANGE = (16, 200_000)
TOOL_ROUND_TOKENS = 512  # a tool round answers with a few calls of short arguments
STRING_CHARS = 300  # a string counted at its maxLength, at most this
LIST_ITEMS = 4  # a list counted at its maxItems, at most this many
CHARS_PER_TOKEN = 3
MAX_DEFAULT = 2048


def _state_schemas() -> dict[str, tuple[type, ...]]:
    """The contracts each state's structured passes ask for (agent/analysts.py, debate.py, trader.py, reviewer.py,
    graph/machine/nodes/planning.py, memorizing.py)."""
    from schemas.analysis import AnalystNote, QuantAnswer
    from schemas.debate import DebateCase, ManagerVerdict
    from schemas.decision import TradeThesis
    from schemas.memory import AgentMemory, TradeReview
    from schemas.plan import Plan
    from schemas.states import STATES

    asked: dict[str, tuple[type, ...]] = {
        "PLANNING": (Plan,),
        "ANALYZING": (AnalystNote, QuantAnswer),
        "DEBATE": (DebateCase, ManagerVerdict),
        "DECIDING": (TradeThesis,),
        "MEMORIZING": (AgentMemory, TradeReview),
    }
    return {state: asked.get(state, ()) for state in STATES}


def longest_json(node: Any, defs: Mapping[str, Any]) -> int:
    """Characters of a generous JSON value of `node` (a JSON Schema): strings and lists at their bounds, capped."""
    if not isinstance(node, dict):
        return 8
    if "$ref" in node:
        return longest_json(defs.get(node["$ref"].rsplit("/", 1)[-1], {}), defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            parts = [longest_json(n, defs) for n in node[key]]
            return sum(parts) if key == "allOf" else max(parts)
    if "enum" in node:
        return max(len(str(v)) + 2 for v in node["enum"])
    if "const" in node:
        return len(str(node["const"])) + 2
    kind = node.get("type")
    if kind == "string":
        return min(int(node.get("maxLength", STRING_CHARS)), STRING_CHARS) + 2
    if kind in ("number", "integer"):
        return 20
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "array":
        items = min(int(node.get("maxItems", LIST_ITEMS)), LIST_ITEMS)
        return 2 + items * (longest_json(node.get("items", {}), defs) + 1)
    props = node.get("properties") or {}
    return 2 + sum(len(name) + 4 + longest_json(sub, defs) for name, sub in props.items())


def contract_tokens(schema: type[BaseModel]) -> int:
    full = schema.model_json_schema()
    chars = longest_json(full, full.get("$defs", {}))
    return math.ceil(chars / CHARS_PER_TOKEN * 1.25)


def contract_caps() -> dict[str, int]:
    """Each state's default cap worked out from its contracts (building their JSON Schemas: ~0.1-0.5 s)."""
    return {
        state: min(MAX_DEFAULT, max([TOOL_ROUND_TOKENS, *(contract_tokens(s) for s in schemas)]))
        for state, schemas in _state_schemas().items()
    }


# contract_caps() written down: every command's start-up check parses the caps, and building eight contracts' JSON
# Schemas for that made `tradegraph sessions` slow (issue 29). tests/unit/test_output_caps_table.py holds the two
# equal: a contract that changes fails it with the table to paste here.
DEFAULT_CAPS = {
    "SCANNING": 512,
    "PLANNING": 1809,
    "ANALYZING": 1450,
    "DEBATE": 1313,
    "DECIDING": 1483,
    "VALIDATING": 512,
    "EXECUTING": 512,
    "MEMORIZING": 2048,
}


def default_caps() -> dict[str, int]:
    return dict(DEFAULT_CAPS)


def _cap(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if not CAP_RANGE[0] <= value <= CAP_RANGE[1]:
        raise ConfigError(f"{name}={raw!r} is outside {CAP_RANGE[0]}..{CAP_RANGE[1]}")
    return value


def as_text(caps: Mapping[str, int]) -> str:
    """The caps as AgentConfig keeps them: "SCANNING=512,PLANNING=1809,…" (hashable, and a manifest's JSON reads
    back equal, so a replay's configuration check compares like with like)."""
    return ",".join(f"{state}={cap}" for state, cap in caps.items())


def parse(text: Any) -> dict[str, int]:
    if not text:
        return {}
    return {state: int(cap) for state, _, cap in (part.partition("=") for part in str(text).split(","))}


def default_text() -> str:
    return as_text(default_caps())


def caps_from_env(env: Optional[Mapping[str, str]] = None) -> str:
    """Every state's cap (as_text): the defaults, TRADEGRAPH_MAX_OUTPUT_TOKENS over them, a state's own over that.
    A per-state variable naming no state is an error, not a setting quietly ignored."""
    env = os.environ if env is None else env
    caps = default_caps()
    every = env.get(CAP_VAR)
    if every:
        caps = dict.fromkeys(caps, _cap(CAP_VAR, every))
    prefix = CAP_VAR + "_"
    for name, raw in env.items():
        if name.startswith(prefix) and raw:
            state = name[len(prefix) :]
            if state not in caps:
                raise ConfigError(f"{name}={raw!r}: {state!r} is not a state ({', '.join(caps)})")
            caps[state] = _cap(name, raw)
    return as_text(caps)


def cap_of(caps: Any, state: Optional[str]) -> Optional[int]:
    """A state's cap from AgentConfig.output_caps (as_text) or a model's metadata (a dict); a call outside a state
    (RUNNER) gets the largest."""
    table = caps if isinstance(caps, dict) else parse(caps)
    if not table:
        return None
    return table.get(state or "") or max(table.values())
