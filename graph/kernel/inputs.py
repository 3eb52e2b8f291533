"""What a capability's input brings to a run: its data files (checked, and allowed by the transport's policy) and
its spending (the cache switch and budgets over the environment's). Used by the capabilities and the task kinds."""

from __future__ import annotations

import dataclasses
from typing import Optional

from graph.kernel import models as m
from graph.kernel.errors import BadInput, Forbidden
from graph.kernel.policy import Policy


def with_spending(rt, inp: m.LlmSpending):
    """The services with the input's cache switch and budgets over the environment's."""
    overrides = inp.config_overrides()
    if overrides:
        rt.config = dataclasses.replace(rt.config, **overrides)
    return rt


def data_files(inp, store=None, session_id: Optional[str] = None, policy: Optional[Policy] = None):
    """The input's own data files over what the session read before (graph.machine.session_files), each one read
    here first, so a bad file is bad input naming its field (the services then reuse what was read). A file the
    transport's policy may not read is refused before it is opened."""
    from agent.data.market import DataError
    from agent.data.sources import DataFiles, load_file
    from graph.machine.session_files import session_files

    # an input without data fields (approve, portfolio) gets what its session read
    given = DataFiles(**{k: getattr(inp, k, None) for k in ("prices", "news", "fundamentals")})
    for kind, path in given.given().items():
        refusal = policy.data_refusal(path) if policy is not None else None
        if refusal is not None:
            raise Forbidden(f"{kind}: {refusal}", field=kind)
    files = session_files(store, session_id, given) if store is not None else given
    for kind, path in files.given().items():
        try:
            load_file(kind, path)
        except DataError as e:
            origin = kind if kind in given.given() else f"{kind} (as session '{session_id}' read it)"
            raise BadInput(f"{origin}: {e}", field=kind) from None
    return files
