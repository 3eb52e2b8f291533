"""The critical path of a cycle: the longest chain of LLM calls that must run one after another.

Offline runs call the model inline, one call after another, so wall time says nothing about latency with
a networked model. This counts it from a recorded cycle instead: its `llm_request` events, grouped by
state, cut into agent runs (a run is a structured pass and the tool passes before it, which depend on each
other), and combined the way each state's node fans out when the model is networked:

- ANALYZING: every (symbol, analyst) and (symbol, quant) branch at once (graph/nodes/analyzing.py), so
  the state costs its longest run;
- DEBATE: symbols at once (graph/nodes/debate.py); within a symbol bull and bear build at once, then
  rebut at once, then the manager judges (agent/debate.py), so a symbol costs max(build) + max(rebuttal)
  + verdict, and the state its slowest symbol;
- DECIDING: one thesis per symbol, all at once (graph/nodes/deciding.py): its longest run;
- every other state: its runs one after another.
A repair retry is one more call in its run (it waits for the failed answer).
"""
from __future__ import annotations

from typing import Any, Iterable

from schemas.states import STATES

FAN_OUT = {"ANALYZING": "branches", "DEBATE": "sides", "DECIDING": "branches"}
VERDICT = "ManagerVerdict"


def _runs(requests: list[dict[str, Any]]) -> list[tuple[str | None, int]]:
    """(schema answered, calls) per agent run, in recorded order."""
    runs, calls = [], 0
    for r in requests:
        calls += 1
        schema = (r.get("payload") or {}).get("structured_output")
        if schema:
            if runs and runs[-1][0] == schema and (r.get("payload") or {}).get("attempt", 1) > 1:
                runs[-1] = (schema, runs[-1][1] + calls)  # a retry of the same pass: same run
            else:
                runs.append((schema, calls))
            calls = 0
    if calls:
        runs.append((None, calls))
    return runs


def _debate_depth(runs: list[tuple[str | None, int]]) -> int:
    deepest, sides = 0, []
    for schema, n in runs:
        if schema == VERDICT:
            # sides come in bull/bear pairs: build, then rebuttal
            depth = sum(max(sides[i:i + 2]) for i in range(0, len(sides), 2)) + n
            deepest, sides = max(deepest, depth), []
        else:
            sides.append(n)
    if sides:  # a debate cut off before its verdict
        deepest = max(deepest, sum(max(sides[i:i + 2]) for i in range(0, len(sides), 2)))
    return deepest


def critical_path(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    """{state: calls on the critical path} for ONE cycle's events (any kinds, seq order), plus "total"."""
    by_state: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("kind") == "llm_request":
            by_state.setdefault(e.get("state") or "RUNNER", []).append(e)
    out: dict[str, int] = {}
    for state in [s for s in STATES if s in by_state] + [s for s in by_state if s not in STATES]:
        runs = _runs(by_state[state])
        how = FAN_OUT.get(state)
        if how == "branches":
            out[state] = max(n for _, n in runs)
        elif how == "sides":
            out[state] = _debate_depth(runs)
        else:
            out[state] = sum(n for _, n in runs)
    out["total"] = sum(out.values())
    return out


def describe(path: dict[str, int]) -> str:
    return " + ".join(f"{s} {n}" for s, n in path.items() if s != "total") + f" = {path['total']}"
