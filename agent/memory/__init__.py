"""Memory: hybrid retrieval over past reviews and cycle notes."""
