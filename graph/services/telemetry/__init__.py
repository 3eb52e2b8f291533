"""OpenTelemetry export of the audit log: a cycle's events as GenAI spans (spans.py), sent over OTLP/HTTP
(export.py) after the fact or as each cycle ends (live.py), drawn as a tree for a terminal (tree.py)."""
