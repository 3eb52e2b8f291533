"""Where each capability lives over HTTP: shared by the server (graph/transports/http.py) and the HTTP
client (graph/transports/client.py), so the two cannot drift. Path parameters come from the template; the other
arguments go in the JSON body (POST with body=True) or the query string."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    body: bool = False

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)


ROUTES: dict[str, Route] = {
    "run_cycle": Route("POST", "/cycles", body=True),
    "approve": Route("POST", "/sessions/{session_id}/approval", body=True),
    "list_sessions": Route("GET", "/sessions"),
    "delete_session": Route("DELETE", "/sessions/{session_id}"),
    "prune_sessions": Route("POST", "/sessions/prune", body=True),
    "read_events": Route("GET", "/sessions/{session_id}/events"),
    "portfolio": Route("GET", "/sessions/{session_id}/portfolio"),
    "replay": Route("GET", "/sessions/{session_id}/replay"),
    "verify": Route("POST", "/sessions/{session_id}/verify"),
    "features": Route("GET", "/features/{symbol}"),
    "memory_search": Route("GET", "/memory/{symbol}"),
    "contract_schemas": Route("GET", "/schemas"),
    "store_status": Route("GET", "/store"),
    "start_backtest": Route("POST", "/backtests", body=True),
    "start_sweep": Route("POST", "/sweeps", body=True),
    "start_benchmark": Route("POST", "/benchmarks/stockbench", body=True),
    "estimate_benchmark": Route("POST", "/benchmarks/stockbench/estimate", body=True),
    "audit_lookahead": Route("GET", "/audit/lookahead/{target}"),
    "list_tasks": Route("GET", "/tasks"),
    "task_status": Route("GET", "/tasks/{task_id}"),
    "cancel_task": Route("DELETE", "/tasks/{task_id}"),
    "resume_task": Route("POST", "/tasks/{task_id}/resume"),
    "task_artifacts": Route("GET", "/tasks/{task_id}/artifacts"),
}
# not a capability: the progress stream of task_status, as Server-Sent Events
TASK_EVENTS = "/tasks/{task_id}/events"
