"""Who answers EXECUTING's approval request: a human (`AskHuman`: the cycle pauses on a LangGraph interrupt until
`tradegraph approve` resumes it) or a recording (`RecordedApproval`, which replay installs: the recorded decision,
answered at once). The node asks either the same way."""

from __future__ import annotations

from typing import Any, Protocol

from langgraph.types import interrupt


class Approver(Protocol):
    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """{"approved": bool, "by": who} for the orders in `request`."""


class AskHuman:
    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        return interrupt(request)


class RecordedApproval:
    def __init__(self, recorded: dict[str, Any]):
        self.recorded = recorded

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.recorded
