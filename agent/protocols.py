"""The pass protocols: how the passes talk to a model, as named versions in one table.

A protocol is what a request's messages hold. Each cycle's manifest records its number (graph/machine/manifest.py)
and a replay asks the model what its recording asked (Temporal's versioning: history is the truth; a session
recorded under protocol 1 replays under protocol 1). Code asks a version's flags (`version(n).lean_prompts`), never
compares numbers: a new protocol is a new row here with what it changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.states import ALLOW_LISTS
from schemas.states import allow_list as _table_allow_list


@dataclass(frozen=True)
class PassProtocol:
    number: int
    name: str
    changed: str  # what this version changed from the one before, for a reader of a manifest
    # a tool pass followed by a structured pass ends with the first round whose calls all ran (else the model is
    # asked again until it calls nothing, and that answer is thrown away)
    ends_on_tool_results: bool
    # tool results as compact JSON (else json.dumps' default separators), and json_mode's schema without `title`s
    compact_json: bool
    # lean prompts: the shorter system prompt, notes on one line, nothing said twice, the quant's indicators from
    # its tools, and JSON schemas without the fields code sets or string bounds
    lean_prompts: bool
    # the JSON schema a model is sent keeps every constraint the contract checks (patterns, string lengths, enums,
    # bounds): protocol 4 left out string lengths and patterns, so a model was refused for rules it was never shown
    shows_constraints: bool = False

    @property
    def planning_tools(self) -> bool:
        """PLANNING runs a tool pass over the market tools (before protocol 3 retired its allow-list)."""
        return bool(self.allow_list("PLANNING"))

    def allow_list(self, state: str) -> frozenset[str]:
        """The tools `state` may call under this protocol: the state table's, or the retired list it had then
        (schemas/states.py RETIRED_ALLOW_LISTS, the one place an allow-list is defined besides the table)."""
        return _table_allow_list(state, self.number)

    def allow_lists(self) -> dict[str, frozenset[str]]:
        return {state: self.allow_list(state) for state in ALLOW_LISTS}


# Each version in full (the table's `changed` is its one-line summary):
#   1: after every tool round the model is asked again, until it answers without tool calls; tool results as
#      json.dumps' default text. The answer of that last call ("no more tools") is thrown away by the structured
#      pass that follows: one sequential call per tool pass for nothing.
#   2: when a structured pass follows, the pass ends with the first round whose tool calls all ran; their results
#      go straight into the structured pass's messages. A round with a refused, invalid or failed call is answered
#      with the error and the model gets another round (bounded by TRADEGRAPH_MAX_TOOL_STEPS), so a model can still
#      mend a bad call. Tool results as compact JSON; json_mode's schema in the prompt without `title` keys.
#   3: PLANNING makes no tool pass: its two tools (get_portfolio, get_market_snapshot) only returned what SCANNING
#      had already put in the scan, so its evidence, built by code, now carries their answers and the planner is one
#      structured pass (one call fewer on every cycle's critical path). Its retired allow-list, which a replay of a
#      protocol 1 or 2 recording needs, is schemas/states.py `RETIRED_ALLOW_LISTS`. Passes otherwise as in 2.
#   4: lean prompts (issue 24: a StockBench symbol-decision cost ~13k prompt tokens): a shorter system prompt; past
#      notes with their tags and fenced text on one line (agent/prompts.py); a rebuttal without the notes its side's
#      case was built on (that case is its evidence); no point repeated within one prompt (a debate side's key points
#      are its notes' and the opposing ones; the manager's panel briefs leave out the points the cases carry); the
#      quant's evidence is its question, the indicators come from its tools, and its notes join it for the
#      structured pass only (the tool pass decides what to fetch); a critique's note and a fundamental analyst's
#      evidence without what code sets (model_used, self_critiqued; source, available); the JSON schema a model is
#      sent leaves out the fields code sets (MODEL_SETS) and string lengths and patterns (the contract still checks
#      them all). Passes otherwise as in 3.
#   5: the schema sent keeps string lengths and patterns again (issue 31): a Plan's tickers and a memory's as_of date
#      were refused for patterns the model was never shown. Passes otherwise as in 4.
PROTOCOLS: dict[int, PassProtocol] = {
    p.number: p
    for p in (
        PassProtocol(
            1,
            "original",
            "the original passes: after every tool round the model is asked again; tool results "
            "as json.dumps' default text",
            ends_on_tool_results=False,
            compact_json=False,
            lean_prompts=False,
        ),
        PassProtocol(
            2,
            "compact tool results",
            "a tool pass ends with the round whose calls all ran, its results go "
            "straight to the structured pass; compact JSON; json_mode's schema without titles",
            ends_on_tool_results=True,
            compact_json=True,
            lean_prompts=False,
        ),
        PassProtocol(
            3,
            "planning without tools",
            "PLANNING is one structured pass: its evidence carries what get_portfolio and get_market_snapshot returned",
            ends_on_tool_results=True,
            compact_json=True,
            lean_prompts=False,
        ),
        PassProtocol(
            4,
            "lean prompts",
            "a shorter system prompt, notes on one line, nothing said twice, the quant's "
            "indicators from its tools, JSON schemas without the fields code sets or string bounds",
            ends_on_tool_results=True,
            compact_json=True,
            lean_prompts=True,
        ),
        PassProtocol(
            5,
            "constraints shown",
            "the JSON schema a model is sent keeps the contract's string lengths and "
            "patterns (a ticker's, a date's): every constraint the validator enforces",
            ends_on_tool_results=True,
            compact_json=True,
            lean_prompts=True,
            shows_constraints=True,
        ),
    )
}
PASS_PROTOCOLS = tuple(PROTOCOLS)
PASS_PROTOCOL = 5  # what this code records and runs live
CURRENT = PROTOCOLS[PASS_PROTOCOL]


def version(number: int | None) -> PassProtocol:
    """The named version of protocol `number` (None: the current one); one this code does not speak is refused."""
    if number is None:
        return CURRENT
    found = PROTOCOLS.get(number) if isinstance(number, int) and not isinstance(number, bool) else None
    if found is None:
        raise ValueError(
            f"pass protocol {number!r} is unknown to this code (it speaks {', '.join(map(str, PASS_PROTOCOLS))})"
        )
    return found
