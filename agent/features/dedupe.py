"""The same story told twice: one definition of a near-duplicate headline, and a de-duplicator that gives the
answer of comparing every pair without paying for it.

`is_near_duplicate` is the definition (unchanged since the first news features): two normalised headlines are
one story when they are equal, when their word sets have a Jaccard index >= 0.8, or when difflib's ratio of
their characters is >= 0.9. Comparing each headline with every kept one through difflib took 75% of a 20-symbol
StockBench cycle (about 1.5 s of it).

`Deduper` keeps the definition and skips every comparison that provably cannot succeed, so its kept set is the
full comparison's, not an approximation of it (pinned against it on every symbol-day of StockBench's window):
- Equal texts: a set of the kept texts.
- Words: Jaccard >= 0.8 means the sets share >= ceil(0.8 * len) words of either side, so (prefix filtering,
  Bayardo, Ma, Srikant, WWW 2007) under one fixed order of words the first `len - ceil(0.8 len) + 1` words of
  each set share a word: a kept headline is a candidate only when one of its prefix words is in the new one's
  prefix. The order is longest word first, ties alphabetical; any fixed order gives the same answer.
- Characters: difflib's ratio 2M/T (M matched characters, T = len(a) + len(b)) is at most 2 min(len)/T, so a
  kept headline outside the length band 20 min(len) >= 9T is never compared. Inside it, difflib's matching
  blocks are increasing in both strings and merged when adjacent in both, so between two blocks at least one
  character is unmatched: k blocks <= T - 2M + 1. A block of length L holds L - 1 character pairs (bigrams)
  found at the same place in the other string, so the bags of bigrams share >= M - k >= 3M - T - 1 occurrences,
  which ratio >= 0.9 makes >= 0.35 T - 1 (`_bigram_bound`); and the characters themselves share >= M >= 0.45 T.
  Each headline's bigram and character occurrences are bitsets (the k-th repeat is an element of its own), so
  a bound costs one AND and a popcount. difflib runs only on the pairs that pass both: 0.6 of the ~1,100 pairs
  of a StockBench symbol-day, on average.
The word rule is near-linear. The character rule still visits each kept headline of the length band, about a
microsecond each: quadratic in the window with a small constant (1,000 real headlines in one window: 0.07 s;
3,000: 0.7 s; difflib on every pair took 6 s for 300). A prefix filter over q-grams was tried: at a 0.9 ratio a headline's prefix
holds most of its grams, and it proposed as many candidates as the band.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import threading
from collections.abc import Iterable
from dataclasses import dataclass

DIFFLIB_DUP = 0.9

_gram_bits: dict[str, int] = {}  # a gram occurrence's bit, shared by every Story of the process
_bits_lock = threading.Lock()


def is_near_duplicate(a: str, b: str, a_tokens: set[str] | frozenset[str], b_tokens: set[str] | frozenset[str]) -> bool:
    """The definition of one story for two normalised headlines and their word sets (the full comparison)."""
    if a == b:
        return True
    union = a_tokens | b_tokens
    if union and 5 * len(a_tokens & b_tokens) >= 4 * len(union):  # Jaccard >= 0.8, in integers
        return True
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= DIFFLIB_DUP


def full_scan(norms: list[str]) -> list[str]:
    """The definition applied the slow way, each headline against every kept one: what `Deduper` is pinned to
    (tests/unit/test_news_dedupe.py, bench/bench_news.py)."""
    kept: list[str] = []
    for n in norms:
        if not any(is_near_duplicate(n, k, set(n.split()), set(k.split())) for k in kept):
            kept.append(n)
    return kept


def _bigram_bound(t: int) -> int:
    """Bigram occurrences two headlines whose lengths sum to t share when difflib's ratio is >= 0.9."""
    return -(-(7 * t - 20) // 20)  # ceil(0.35 t - 1)


def _occurrences(grams: Iterable[str]) -> int:
    """A bag of grams as a bitset: the k-th occurrence of a gram is an element of its own, so the popcount of
    two bitsets' AND is the size of the bags' intersection."""
    seen: dict[str, int] = {}
    bits = 0
    for g in grams:
        k = seen.get(g, 0)
        seen[g] = k + 1
        key = f"{g}\x00{k}"  # a normalised text has no NUL: a character's and a bigram's keys never meet
        bit = _gram_bits.get(key)
        if bit is None:
            with _bits_lock:
                bit = _gram_bits.setdefault(key, len(_gram_bits))
        bits |= 1 << bit
    return bits


@dataclass(frozen=True, slots=True)
class Story:
    """What de-duplication needs of one normalised headline, computed once per text (`story_of`)."""

    norm: str
    tokens: frozenset[str]
    word_prefix: tuple[str, ...]
    chars: int  # bitset of the character occurrences (the k-th repeat of a character is an element of its own)
    bigrams: int  # bitset of the bigram occurrences


@functools.lru_cache(maxsize=16384)
def story_of(norm: str) -> Story:
    """Memoised per text: a backtest's 30-day windows overlap, so each headline is prepared once, not ~20 times."""
    chars = _occurrences(norm)
    bigrams = _occurrences(norm[i : i + 2] for i in range(len(norm) - 1))
    tokens = frozenset(norm.split())
    words = sorted(tokens, key=lambda w: (-len(w), w))
    prefix = len(words) - (-(-4 * len(words) // 5)) + 1  # len - ceil(0.8 len) + 1
    return Story(norm, tokens, tuple(words[:prefix]), chars, bigrams)


def same_words(a: Story, b: Story) -> bool:
    """Word sets with a Jaccard index >= 0.8 (in integers: 5 |a & b| >= 4 |a | b|)."""
    ma, mb = len(a.tokens), len(b.tokens)
    if not ma or 5 * min(ma, mb) < 4 * max(ma, mb):  # Jaccard <= min/max
        return False
    both = len(a.tokens & b.tokens)
    return 5 * both >= 4 * (ma + mb - both)


def same_chars(a: Story, b: Story) -> bool:
    """difflib's ratio >= 0.9, after its two necessary conditions (module docstring)."""
    la, lb = len(a.norm), len(b.norm)
    t = la + lb
    if (
        20 * min(la, lb) < 9 * t
        or 20 * (a.chars & b.chars).bit_count() < 9 * t
        or (a.bigrams & b.bigrams).bit_count() < _bigram_bound(t)
    ):
        return False
    return difflib.SequenceMatcher(None, a.norm, b.norm, autojunk=False).ratio() >= DIFFLIB_DUP


def same_story(a: Story, b: Story) -> bool:
    """`is_near_duplicate` on two prepared headlines."""
    return a.norm == b.norm or same_words(a, b) or same_chars(a, b)


class Deduper:
    """The headlines of one call, offered oldest first: a headline is kept unless it is the same story as a
    kept one (`same_story`), which is decided only where it can be true (module docstring)."""

    def __init__(self) -> None:
        self._kept: list[Story] = []
        self._norms: set[str] = set()
        self._by_word: dict[str, list[int]] = {}
        self._lengths: list[int] = []  # the kept headlines' lengths, sorted, and their indexes in that order
        self._by_length: list[int] = []

    def offer(self, s: Story) -> bool:
        """True when `s` is kept, False when it repeats a kept story."""
        if s.norm in self._norms:
            return False
        kept = self._kept
        get = self._by_word.get
        words = {i for w in s.word_prefix for i in get(w, ())}
        # any(): a yes or no, so the order in which candidates are tried changes nothing
        if any(same_words(s, kept[i]) for i in words):
            return False
        la = len(s.norm)
        lo = bisect.bisect_left(self._lengths, -(-9 * la // 11))  # 20 min(la, lb) >= 9 (la + lb)
        hi = bisect.bisect_right(self._lengths, 11 * la // 9)
        if any(same_chars(s, kept[i]) for i in self._by_length[lo:hi]):
            return False
        i = len(kept)
        kept.append(s)
        self._norms.add(s.norm)
        for w in s.word_prefix:
            self._by_word.setdefault(w, []).append(i)
        at = bisect.bisect_right(self._lengths, la)
        self._lengths.insert(at, la)
        self._by_length.insert(at, i)
        return True
