"""The schema one call is sent: its contract's, plus the run-time facts its validator checks the answer against.

A contract's JSON Schema says what any answer looks like; the checks of a structured pass also hold an answer to
what this call was about (agent/passes.py structured_pass): the symbol asked about, the analyst's role, the debate
side, the debate's winner, the bundle's indicator values, the figures the evidence holds and the symbols the cycle
trades (agent/guards.py). A server that constrains its output with the schema (llama.cpp compiles it into a
grammar) can then only produce an answer those checks accept, so a small model is not refused for rules it was
never shown. The validator is unchanged: it still guards providers that ignore schemas, and is what decides.

Every rule here is tighter than its check, never looser: a string the pattern admits passes the guards
(tests/unit/test_call_schema.py draws strings from each pattern and runs the guards on them). Quotations, which the
guards exempt, are not offered: the text is the model's own words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

# never in a free string: a quote or backslash needs an escape the grammar would have to spell out, and a raw
# control character (SmolLM2 wrote a newline inside "summary") is invalid JSON
UNSAFE = r'"\\\x00-\x1F\x7F'
GRAMMAR_ITEMS = 300  # the longest repetition a pattern spells out (agent/passes.py GRAMMAR_CHARS)
MAX_FIGURES = 64  # figures offered by name: a tool's 60 bars would make a grammar of thousands of alternatives
INT = "[0-9]{1,4}"  # a plain integer (a window, a count, a year) is not a figure (agent/guards.py _NUMBER_RE)
# every decimal digit but 0-9 (Python's \d, which the guards' numbers read, is all of Unicode's): a free string
# holds none, so `74.2464` cannot be followed by one that makes it another number (tests/unit/test_call_schema.py
# checks this table against unicodedata)
OTHER_DIGITS = (
    "\u0660-\u0669\u06f0-\u06f9\u07c0-\u07c9\u0966-\u096f\u09e6-\u09ef\u0a66-\u0a6f\u0ae6-\u0aef"
    "\u0b66-\u0b6f\u0be6-\u0bef\u0c66-\u0c6f\u0ce6-\u0cef\u0d66-\u0d6f\u0de6-\u0def\u0e50-\u0e59"
    "\u0ed0-\u0ed9\u0f20-\u0f29\u1040-\u1049\u1090-\u1099\u17e0-\u17e9\u1810-\u1819\u1946-\u194f"
    "\u19d0-\u19d9\u1a80-\u1a89\u1a90-\u1a99\u1b50-\u1b59\u1bb0-\u1bb9\u1c40-\u1c49\u1c50-\u1c59"
    "\ua620-\ua629\ua8d0-\ua8d9\ua900-\ua909\ua9d0-\ua9d9\ua9f0-\ua9f9\uaa50-\uaa59\uabf0-\uabf9"
    "\uff10-\uff19\U000104a0-\U000104a9\U00010d30-\U00010d39\U00011066-\U0001106f"
    "\U000110f0-\U000110f9\U00011136-\U0001113f\U000111d0-\U000111d9\U000112f0-\U000112f9"
    "\U00011450-\U00011459\U000114d0-\U000114d9\U00011650-\U00011659\U000116c0-\U000116c9"
    "\U00011730-\U00011739\U000118e0-\U000118e9\U00011950-\U00011959\U00011c50-\U00011c59"
    "\U00011d50-\U00011d59\U00011da0-\U00011da9\U00016a60-\U00016a69\U00016ac0-\U00016ac9"
    "\U00016b50-\U00016b59\U0001d7ce-\U0001d7ff\U0001e140-\U0001e149\U0001e2f0-\U0001e2f9"
    "\U0001e950-\U0001e959\U0001fbf0-\U0001fbf9"
)


def _literal(text: str) -> str:
    """`text` as a regex every engine reads alike: a character that is not a letter or digit in a class."""
    return "".join(c if c.isalnum() else f"[{c}]" if c != "-" else r"\-" for c in text)


def figure_texts(numbers: Iterable[float], limit: int = MAX_FIGURES) -> tuple[str, ...]:
    """The figures a text may state: each number shown as Python writes it (72.095, 144783518.0) and rounded to
    each shorter count of decimals down to 2 (46.3843 as 46.384 and 46.38: agent/guards.py cites), for the first
    `limit` numbers shown; an integer with its .0 (a figure has decimals); one Python writes with an exponent not."""
    out: list[str] = []
    seen = 0
    for x in numbers:
        text = repr(abs(float(x)))
        if not re.fullmatch(r"\d+\.\d+", text):
            continue
        decimals = len(text.split(".")[1])
        for written in [text] + [f"{abs(float(x)):.{d}f}" for d in range(decimals - 1, 1, -1)]:
            if written not in out:
                out.append(written)
        seen += 1
        if seen >= limit:
            break
    return tuple(out)


@dataclass(frozen=True)
class TextRule:
    """What a free string of a contract about `symbol` may say (agent/guards.py check_symbol, check_figures).

    No other symbol: never a `$` (a `$XYZ` names any ticker); when the cycle trades no other symbol, never a `:`
    either (`NASDAQ: MSFT`); when it does, capitals only as the symbol itself or a capital before a lower-case letter,
    so no other symbol of the universe can be spelled. `figures` (None: any): digits only as a plain integer of
    up to 4 digits or as one of these figures, each followed by a character that cannot extend it."""

    symbol: str
    others: bool
    figures: Optional[tuple[str, ...]] = None

    def _bad(self, extra: str = "") -> str:
        return (
            UNSAFE
            + "$"
            + ("A-Z" if self.others else ":")
            + ("0-9" + OTHER_DIGITS if self.figures is not None else "")
            + extra
        )

    def _parts(self) -> tuple[list[str], str]:
        """The items a string is made of, and what may end it."""
        items = [f"[^{self._bad()}]"]
        if self.others:
            items += ["[A-Z][a-z]", _literal(self.symbol)]
        if self.figures is None:
            return items, ""
        safe = f"[^{self._bad('.,%')}]"  # after a number: nothing that makes it longer, another figure or a %
        figs = "|".join(_literal(f) for f in self.figures)
        number = f"({INT}|({figs})[%]?)" if figs else f"({INT})"
        items.append(f"{number}({safe}|[.,]{safe})")
        return items, f"({number}[.,]?)?"  # a number may end the text, and a full stop after it

    def pattern(self, min_length: int = 0, max_length: Optional[int] = None) -> str:
        """A free string's pattern: at least one item when the string may not be empty, at most `max_length`
        items (each is one character or more). A grammar compiled from it bounds the items, not the characters:
        the string's maxLength stays beside it in the schema, and the validator counts the characters."""
        items, end = self._parts()
        most = GRAMMAR_ITEMS if max_length is None else max(1, min(GRAMMAR_ITEMS, int(max_length)))
        return f"^({'|'.join(items)}){{{1 if min_length else 0},{most}}}{end}$"


@dataclass(frozen=True)
class CallFacts:
    """What one call's answer is checked against: `pins` are property schemas that replace the contract's (a
    `const`, an `enum`, an object of named values), `text` the rule for every free string."""

    pins: Mapping[str, dict] = field(default_factory=dict)
    text: Optional[TextRule] = None

    def key(self) -> str:
        return json.dumps({"pins": self.pins, "text": self.text and self.text.__dict__}, sort_keys=True, default=str)


def free_text(node: Any) -> bool:
    return (
        isinstance(node, dict)
        and node.get("type") == "string"
        and not ({"enum", "const", "format", "pattern"} & set(node))
    )


def with_text_rule(node: Any, rule: TextRule) -> Any:
    """Every free string of a schema, however deep (items, anyOf, additionalProperties), under `rule`."""
    if isinstance(node, list):
        return [with_text_rule(x, rule) for x in node]
    if not isinstance(node, dict):
        return node
    if free_text(node):
        return {**node, "pattern": rule.pattern(int(node.get("minLength", 0)), node.get("maxLength"))}
    return {
        k: (
            v
            if k in ("enum", "const", "default")
            else {n: with_text_rule(s, rule) for n, s in v.items()}
            if k in ("properties", "$defs")
            else with_text_rule(v, rule)
        )
        for k, v in node.items()
    }


def call_schema(asked: dict, facts: CallFacts) -> dict:
    """The schema this call is sent: `asked` (the contract's, agent/passes.py asked_schema) with the pinned
    properties replaced and every other free string under the text rule."""
    out = with_text_rule(asked, facts.text) if facts.text is not None else dict(asked)
    props = dict(out.get("properties", {}))
    unknown = set(facts.pins) - set(props)
    if unknown:
        raise ValueError(f"pinned fields the schema does not have: {sorted(unknown)}")
    props.update(facts.pins)
    return {**out, "properties": props}


def named_values(values: Mapping[str, Any]) -> dict:
    """An object whose every property is one of `values` with exactly its value (the quant's metrics: a name the
    bundle computed, its value as computed); a name or value of none is refused."""
    props = {
        k: {"const": v} for k, v in sorted(values.items()) if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return {"type": "object", "properties": props, "additionalProperties": False}


MAX_SUBSETS_OF = 4  # a universe of up to 4 symbols is sent as its 15 ordered subsets; a larger one as itself


def distinct_symbols(universe: Iterable[str]) -> dict:
    """A list of the universe's symbols, each at most once (a Plan's assets: in the universe, distinct). A grammar
    cannot say "distinct" (`uniqueItems`, kept beside it, is not compiled): so a small universe is offered as its
    non-empty subsets in its own order, a larger one as the whole universe, which is one of the lists allowed."""
    symbols = list(dict.fromkeys(universe))
    if len(symbols) > MAX_SUBSETS_OF:  # before enumerating: a 30-symbol universe has 2**30 subsets
        subsets = [symbols]
    else:
        subsets = [[s for i, s in enumerate(symbols) if mask >> i & 1] for mask in range(1, 2 ** len(symbols))]
    return {"type": "array", "uniqueItems": True, "anyOf": [{"const": s} for s in subsets]}
