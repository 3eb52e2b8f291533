"""Memory: hybrid retrieval over past reviews and cycle notes."""

from agent.memory.embeddings import HashedEmbeddings
from agent.memory.index import HybridIndex
from agent.memory.tokens import tokenize

__all__ = ["HashedEmbeddings", "HybridIndex", "tokenize"]
