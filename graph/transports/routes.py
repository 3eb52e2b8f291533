"""Each capability's HTTP shape, derived from its registry entry (`Capability.http`: method, path, tag, status) and
its input model; shared by the server (graph/transports/http.py) and the HTTP client (graph/transports/client.py),
so the two cannot drift and a new capability needs no line here.

The fields the path names are path parameters; the other fields are one model, `rest_model`: the JSON body of a
POST, or the query string of a GET or DELETE. The endpoints that are not capabilities are named at the bottom."""

from __future__ import annotations

import copy
import functools
from typing import Any, Optional

from pydantic import BaseModel, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from graph.kernel.capabilities import CAPABILITIES, Capability, Route


def routes() -> dict[str, Route]:
    """Every capability's route, as registered now."""
    return {name: cap.http for name, cap in CAPABILITIES.items()}


@functools.cache
def rest_model(cap: Capability) -> Optional[type[BaseModel]]:
    """The input model's fields outside the path, as one model: the input model itself when the path names none,
    None when there are none. Validated again by the kernel as the whole input, so a check that spans a path
    parameter and another field still applies."""
    path = set(cap.http.path_params)
    fields: dict[str, Any] = {
        name: (f.annotation, _required(f) if name in cap.http.explicit else f)
        for name, f in cap.input_model.model_fields.items()
        if name not in path
    }
    if not fields:
        return None
    if not path and not cap.http.explicit:
        return cap.input_model
    name = "".join(w.capitalize() for w in cap.name.split("_")) + ("Body" if cap.http.body else "Query")
    return create_model(name, __config__=cap.input_model.model_config, __doc__=cap.description, **fields)


def _required(f: FieldInfo) -> FieldInfo:
    """The field as the HTTP request must carry it: its type, constraints and description, no default."""
    out = copy.copy(f)
    out.default, out.default_factory = PydanticUndefined, None
    return out


def request(cap: Capability, args: dict[str, Any]) -> tuple[str, Optional[dict], Optional[dict]]:
    """(path, query, body) of a call with these arguments; None values are left out (the model's default), except
    the fields the route wants stated (Route.explicit), sent with the model's default the caller left in place."""
    args = {k: v for k, v in args.items() if v is not None}
    for name in cap.http.explicit:
        args.setdefault(name, cap.input_model.model_fields[name].get_default(call_default_factory=True))
    path = cap.http.path.format(**{p: args.pop(p) for p in cap.http.path_params})
    return (path, None, args) if cap.http.body else (path, args, None)


# not capabilities, under theirs: the progress stream of task_status as Server-Sent Events, one file of task_artifacts
TASK_EVENTS = CAPABILITIES["task_status"].http.path + "/events"
ARTIFACT_FILE = CAPABILITIES["task_artifacts"].http.path + "/{name}"
