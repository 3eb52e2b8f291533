"""The dense side with no model and no network: feature hashing of words and word pairs into a fixed
number of signed dimensions, L2-normalised. Deterministic across processes (blake2b, not Python's salted
hash). Any langchain `Embeddings` object can stand in for it."""

from __future__ import annotations

import hashlib
import math

from langchain_core.embeddings import Embeddings

from agent.memory.tokens import tokenize


class HashedEmbeddings(Embeddings):
    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def _vector(self, text: str) -> list[float]:
        words = tokenize(text)
        vec = [0.0] * self.dim
        for feature in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
            h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
            vec[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec] if norm else vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)
