"""Guards on what a model writes about one symbol: it names no other symbol, and the figures it states are the
evidence's. The rules are PLAN.md's ("Separation of tool calls and structured output", the guards); each failure
is a `GuardError`, a ValueError that structured_pass audits with its `check` name and repairs like any invalid
answer, failing closed after the bounded repairs.

Real headlines name other companies ("Dow Jones Futures: Nvidia Looms After Palantir, Axon, Tesla Lead Market
Sell-Off"), so quoting one is not the model's claim: text that repeats what the model was shown verbatim (a
quotation) is exempt from both rules, and only what the model says in its own words is checked.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel

from agent.fence import FENCE_CLOSE, FENCE_OPEN

MIN_QUOTE = 20  # characters: shorter text ("MSFT", "buy MSFT") is too common to count as a quotation
_EVIDENCE_RE = re.compile(r"<EVIDENCE>\n(.*?)\n</EVIDENCE>", re.S)
_FENCE_RE = re.compile(re.escape(FENCE_OPEN) + "|" + re.escape(FENCE_CLOSE))
_QUOTED_RE = re.compile(r"\"([^\"]+)\"|\u201c([^\u201d]+)\u201d")
_SPACE_RE = re.compile(r"\s+")
# $PLTR, NASDAQ: MSFT, NasdaqGS:HON: a ticker by its form, whatever the universe
_EXPLICIT_RE = re.compile(
    r"\$([A-Z][A-Z0-9.\-]{0,9})\b|\b(?:NYSE|NASDAQ|NasdaqGS|NasdaqGM|Nasdaq|NYSEARCA|AMEX|OTC)"
    r"\s*:\s*([A-Z][A-Z0-9.\-]{0,9})\b"
)
# a figure: a number with decimals, a percentage or a dollar amount; a number inside a word (SMA50, Q1, RSI14)
# is a name, and a plain integer (a count, a window, a threshold, a year) is not a figure
_NUMBER_RE = re.compile(r"(?<![A-Za-z0-9_.])(\$\s?)?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s?%)?")


class GuardError(ValueError):
    """A guard's refusal; `check` names the guard in the audited validation event."""

    def __init__(self, check: str, message: str):
        super().__init__(message)
        self.check = check


def _norm(text: str) -> str:
    return _SPACE_RE.sub(" ", _FENCE_RE.sub(" ", text)).strip().lower()


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class Shown:
    """What a structured pass showed the model, as its guards read it: the text it may quote (every string of
    the evidence block and the tool results, the past notes; fence markers aside) and the numbers it may cite
    (every number of the evidence and the tool results, whatever the fields: a Fundamentals field added later
    counts with no change here). Read from the messages only when a guard needs it: most answers name no
    other symbol and state only figures found at once."""

    def __init__(self, messages: Iterable[BaseMessage]):
        # (message, its text): a message whose content is a list of blocks shows no evidence
        self._messages = [
            (m, m.content)
            for m in messages
            if isinstance(m, (HumanMessage, ToolMessage)) and isinstance(m.content, str)
        ]

    @functools.cached_property
    def _shown(self) -> list[Any]:
        parts: list[Any] = []
        for m, content in self._messages:
            parts += [_json_or_text(block) for block in _EVIDENCE_RE.findall(content)]
            rest = _EVIDENCE_RE.sub(" ", content)
            parts.append(_json_or_text(rest) if isinstance(m, ToolMessage) else rest)
        return list(_leaves(parts))

    @functools.cached_property
    def text(self) -> str:
        return "\n".join(_norm(leaf) for leaf in self._shown if isinstance(leaf, str))

    @functools.cached_property
    def numbers(self) -> list[float]:
        return _numbers(self._shown)

    @functools.cached_property
    def numbers_in_order(self) -> list[float]:
        """The numbers shown, first shown first (the evidence before the tool results): what a per-call schema
        offers as figures (agent/call_schema.py), which keeps the first ones when there are too many."""
        return [float(x) for x in self._shown if isinstance(x, (int, float)) and not isinstance(x, bool)]

    def quotes(self, text: str) -> bool:
        norm = _norm(text).strip(" '\"\u201c\u201d\u2018\u2019.,;:")
        return len(norm) >= MIN_QUOTE and norm in self.text

    def own_words(self, text: str) -> str:
        """`text` without its quotations: all of it when it is one, else its double-quoted spans that are. A span
        leaves " | ", which joins nothing into a figure or a ticker: own words never hold one the text lacks."""
        if self.quotes(text):
            return ""
        return _QUOTED_RE.sub(lambda m: " | " if self.quotes(m.group(1) or m.group(2)) else m.group(0), text)


def _numbers(leaves: Iterable[Any]) -> list[float]:
    return sorted({abs(float(x)) for x in leaves if isinstance(x, (int, float)) and not isinstance(x, bool)})


def strings_of(contract: BaseModel, skip: Collection[str] = ("symbol",)) -> list[str]:
    """The text a contract states, wherever it is (summary, key points, evidence, rationale, ...)."""
    data = contract.model_dump(mode="json")
    return [s for k, v in data.items() if k not in skip for s in _leaves(v) if isinstance(s, str)]


@functools.lru_cache(maxsize=64)
def _universe_re(universe: tuple[str, ...]) -> re.Pattern[str] | None:
    words = [re.escape(s) for s in sorted(universe, key=len, reverse=True) if len(s) > 1]
    letters = [re.escape(s) for s in universe if len(s) == 1]
    parts = ([rf"(?<![A-Za-z0-9$.])({'|'.join(words)})(?![A-Za-z0-9])"] if words else []) + (
        [rf"\(({'|'.join(letters)})\)"] if letters else []
    )
    return re.compile("|".join(parts)) if parts else None


def mentions(text: str, universe: Collection[str]) -> set[str]:
    """The symbols `text` names: any ticker written as $XYZ or EXCHANGE:XYZ, and each universe symbol written
    as a word of its own in capitals ("MSFT", "(GS)"); a one-letter symbol (V) only as $V, (V) or NYSE:V."""
    found = {a or b for a, b in _EXPLICIT_RE.findall(text)}
    pattern = _universe_re(tuple(sorted(universe)))
    if pattern is not None:
        found |= {g for m in pattern.finditer(text) for g in m.groups() if g}
    return found


def check_symbol(contract: BaseModel, asked: str, universe: Collection[str], shown: Shown) -> None:
    """A contract about `asked` names no other symbol in its own words (a quotation may)."""
    texts = strings_of(contract)
    if not mentions("\n".join(texts), universe) - {asked}:
        return  # no other symbol anywhere: nothing to tell quotation from own words for
    for text in texts:
        others = sorted(mentions(shown.own_words(text), universe) - {asked})
        if others:
            raise GuardError(
                "cross_symbol",
                f"a {type(contract).__name__} about {asked} names {', '.join(others)} "
                f"in {text[:120]!r}: mention another symbol only inside a verbatim quote of a "
                f"headline you were shown",
            )


def cites(value: float | None, computed: float | None, min_decimals: int = 2, decimals: int | None = None) -> bool:
    """True if `value` is `computed`, or `computed` rounded to the decimals `value` is written with (at least
    `min_decimals`, so 66.4 -> 66 is not a citation). `decimals`: as written in text (66.70 has 2), else read
    from the float."""
    if value is None or computed is None:
        return value is computed
    if abs(value - computed) <= 1e-9 * max(1.0, abs(computed)):
        return True
    if decimals is None:
        text = repr(float(value))
        decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
    return decimals >= min_decimals and abs(round(computed, decimals) - value) <= 10 ** -(decimals + 3)


def figures(text: str) -> Iterator[tuple[str, float, int]]:
    """(as written, value, decimals) of each figure stated in `text`: decimals, percentages, dollar amounts."""
    for m in _NUMBER_RE.finditer(text):
        dollar, whole, fraction, percent = m.groups()
        if dollar or fraction or percent:
            yield m.group(0).strip(), float(whole.replace(",", "") + (fraction or "")), len(fraction or ".") - 1


def check_figures(contract: BaseModel, shown: Shown) -> None:
    """Every figure a contract states in its own words is a number it was shown, as written or rounded to the
    decimals written (at least 2), or one of its own numbers (stance, confidence, subscores, metrics)."""
    own = _numbers(_leaves(contract.model_dump(mode="json")))

    def cited(value: float, decimals: int) -> bool:
        return _near(value, decimals, own) or _near(value, decimals, shown.numbers)

    for text in strings_of(contract):
        if all(cited(v, d) for _, v, d in figures(text)):
            continue  # every figure is cited, quoted or not
        for written, value, decimals in figures(shown.own_words(text)):
            if not cited(value, decimals):
                raise GuardError(
                    "citation",
                    f"{written} in {text[:120]!r} is not a figure of the evidence: cite "
                    f"computed values as given (or rounded to 2+ decimals), or quote the headline",
                )


def _near(value: float, decimals: int, numbers: list[float]) -> bool:
    """`cites` against the numbers within one unit of the last written decimal (the only ones that can match)."""
    step = 10.0 ** -max(decimals, 0)
    lo, hi = bisect.bisect_left(numbers, value - step), bisect.bisect_right(numbers, value + step)
    return any(cites(value, x, decimals=decimals) for x in numbers[lo:hi])
