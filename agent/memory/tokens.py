"""One tokenizer for BM25, the hashed vector and the relevance floor: lowercase words, fixed stopwords."""

from __future__ import annotations

import re

_WORD_RE = re.compile(r"[a-z0-9_]+")
STOPWORDS = frozenset(
    "a an and are as at be but by for from has have in is it its of on or that the this to was were will with "
    "after before not no so than then there these they we you".split()
)


def tokenize(text: str) -> list[str]:
    return [w for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS]
