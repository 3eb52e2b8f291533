"""The critical path of a cycle: the longest chain of LLM calls that must run one after another.

Offline runs call the model inline, one call after another, so wall time says nothing about latency with
a networked model. This counts it from a recorded cycle instead: its `llm_request` events, grouped by
state, cut into agent runs (a run is a structured pass and the tool passes before it, which depend on each
other), and combined the way each state's node fans out when the model is networked:

- ANALYZING: every (symbol, analyst) and (symbol, quant) branch at once (graph/machine/nodes/analyzing.py), so
  the state costs its longest run;
- DEBATE: symbols at once (graph/machine/nodes/debate.py); within a symbol bull and bear build at once, then
  rebut at once, then the manager judges (agent/debate.py), so a symbol costs max(build) + max(rebuttal)
  + verdict, and the state its slowest symbol;
- DECIDING: one thesis per symbol, all at once (graph/machine/nodes/deciding.py): its longest run;
- MEMORIZING: each closed position's review and the cycle's summary at once (graph/machine/nodes/memorizing.py);
- every other state: its runs one after another.
A repair retry is one more call in its run (it waits for the failed answer).

Runs are told apart by the agent that made them: the TASK line and the evidence's symbol of the request's
prompt (agent/prompts.py `task_messages`), so calls recorded interleaved by parallel branches (a networked
model) still land in their own run, and an analyst's self-critique (`critique:<role>`, which reads the note)
counts in its note's run. Requests without such a prompt (hand-made events) fall back to recorded order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Optional

from schemas.events import LlmRequestEvent, LlmRequestPayload, parse_event
from schemas.states import STATES

FAN_OUT = {"ANALYZING": "branches", "DEBATE": "sides", "DECIDING": "branches", "MEMORIZING": "branches"}
VERDICT = "ManagerVerdict"
_TASK = re.compile(r"^TASK: (\S+)")
_EVIDENCE = re.compile(r"<EVIDENCE>\n(.*?)\n</EVIDENCE>", re.S)


def _agent(request: LlmRequestPayload) -> Optional[tuple[str, Optional[str]]]:
    """(task, symbol) of the prompt a request carries, or None."""
    for m in request.messages:
        raw = m.get("content")
        content = raw if isinstance(raw, str) else ""
        found = _TASK.match(content)
        if found:
            task = found.group(1)
            symbol = None
            evidence = _EVIDENCE.search(content)
            if evidence:
                try:
                    symbol = json.loads(evidence.group(1)).get("symbol")
                except ValueError:
                    pass
            if task.startswith("critique:"):  # the self-critique reads its note: the same run
                task = "analyst:" + task.split(":", 1)[1]
            return task, symbol
    return None


def _keyed(requests: list[LlmRequestPayload]) -> Optional[dict[tuple[str, Optional[str]], int]]:
    """{(task, symbol): calls} when every request names its agent, else None."""
    out: dict[tuple[str, Optional[str]], int] = {}
    for r in requests:
        agent = _agent(r)
        if agent is None:
            return None
        out[agent] = out.get(agent, 0) + 1
    return out


def _keyed_debate_depth(calls: dict[tuple[str, Optional[str]], int]) -> int:
    symbols = {sym for _, sym in calls}
    return (
        max(
            (
                max(calls.get(("bull_build", s), 0), calls.get(("bear_build", s), 0))
                + max(calls.get(("bull_rebuttal", s), 0), calls.get(("bear_rebuttal", s), 0))
                + calls.get(("manager", s), 0)
            )
            for s in symbols
        )
        if symbols
        else 0
    )


def _runs(requests: list[LlmRequestPayload]) -> list[tuple[str | None, int]]:
    """(schema answered, calls) per agent run, in recorded order."""
    runs: list[tuple[str | None, int]] = []
    calls = 0
    for r in requests:
        calls += 1
        schema = r.structured_output
        if schema:
            if runs and runs[-1][0] == schema and r.attempt > 1:
                runs[-1] = (schema, runs[-1][1] + calls)  # a retry of the same pass: same run
            else:
                runs.append((schema, calls))
            calls = 0
    if calls:
        runs.append((None, calls))
    return runs


def _debate_depth(runs: list[tuple[str | None, int]]) -> int:
    deepest, sides = 0, list[int]()
    for schema, n in runs:
        if schema == VERDICT:
            # sides come in bull/bear pairs: build, then rebuttal
            depth = sum(max(sides[i : i + 2]) for i in range(0, len(sides), 2)) + n
            deepest, sides = max(deepest, depth), []
        else:
            sides.append(n)
    if sides:  # a debate cut off before its verdict
        deepest = max(deepest, sum(max(sides[i : i + 2]) for i in range(0, len(sides), 2)))
    return deepest


def critical_path(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    """{state: calls on the critical path} for ONE cycle's events (any kinds, seq order), plus "total"; the requests
    are read through parse_event."""
    by_state: dict[str, list[LlmRequestPayload]] = {}
    for doc in events:
        if doc.get("kind") == "llm_request":
            e = parse_event(doc)
            if isinstance(e, LlmRequestEvent):
                by_state.setdefault(e.state or "RUNNER", []).append(e.payload)
    out: dict[str, int] = {}
    for state in [s for s in STATES if s in by_state] + [s for s in by_state if s not in STATES]:
        how = FAN_OUT.get(state)
        keyed = _keyed(by_state[state])
        if keyed is not None:
            if how == "branches":
                out[state] = max(keyed.values())
            elif how == "sides":
                out[state] = _keyed_debate_depth(keyed)
            else:
                out[state] = sum(keyed.values())
            continue
        runs = _runs(by_state[state])
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
