"""Spans drawn as an indented tree, for a terminal (`tradegraph export otel --stdout`) and for tests that
decode what a collector received: both hand in the same plain form (`plain`)."""

from __future__ import annotations

from typing import Any, Optional

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

# what a line shows, in this order, under a short label (the full keys are in docs/telemetry.md)
_SHOWN = (
    ("tradegraph.session_id", "session"),
    ("tradegraph.cycle.status", "status"),
    ("tradegraph.symbols", "symbols"),
    ("tradegraph.as_of", "as_of"),
    (gen_ai.GEN_AI_PROVIDER_NAME, "provider"),
    (gen_ai.GEN_AI_TOOL_CALL_ID, "call_id"),
    ("tradegraph.contract", "contract"),
    ("tradegraph.llm.attempt", "attempt"),
    (gen_ai.GEN_AI_USAGE_INPUT_TOKENS, "in"),
    (gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, "out"),
    (HTTP_RESPONSE_STATUS_CODE, "http"),
    (ERROR_TYPE, "error.type"),
)
# said once, on the cycle: every chat span of a cycle carries the same provider
_ROOT_ONLY = {gen_ai.GEN_AI_PROVIDER_NAME}


def plain(span: ReadableSpan) -> dict[str, Any]:
    ctx, parent = span.get_span_context(), span.parent
    assert ctx is not None  # a span the SDK ended has its context
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent is not None else None,
        "name": span.name,
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "status_message": span.status.description,
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


def render(spans: list[dict[str, Any]]) -> str:
    """One line per span, indented under its parent: name, start offset within its trace, duration, key
    attributes, and the status when it is ERROR."""
    ids = {s["span_id"] for s in spans}
    children: dict[Optional[str], list[dict]] = {}
    for s in spans:
        parent = s["parent_span_id"] if s["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(s)
    for group in children.values():
        group.sort(key=lambda s: (s["start_ns"], s["end_ns"], s["name"]))
    lines: list[str] = []

    def walk(span: dict, depth: int, origin: int) -> None:
        lines.append("  " * depth + _line(span, origin, root=depth == 0))
        for child in children.get(span["span_id"], []):
            walk(child, depth + 1, origin)

    for root in children.get(None, []):
        walk(root, 0, root["start_ns"])
    return "\n".join(lines)


def _line(span: dict, origin: int, *, root: bool) -> str:
    attrs = span["attributes"]
    shown = []
    for key, label in _SHOWN:
        if key in attrs and (root or key not in _ROOT_ONLY):
            value = attrs[key]
            shown.append(f"{label}={','.join(map(str, value)) if isinstance(value, (list, tuple)) else value}")
    if span["status"] == "ERROR":
        shown.append(f"ERROR {span['status_message']!r}")
    start = (span["start_ns"] - origin) / 1e6
    took = (span["end_ns"] - span["start_ns"]) / 1e6
    return f"{span['name']}  [+{start:.1f} ms, {took:.1f} ms]" + (f"  {' '.join(shown)}" if shown else "")
