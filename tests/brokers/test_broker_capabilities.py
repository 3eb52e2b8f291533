"""The broker's halt and resume are kernel capabilities under the execution policy: refused over a transport that
may not move the book, allowed from the CLI, each audited with who (and the transport) in broker-control's log."""

from __future__ import annotations

import pytest

from graph.kernel.core import Kernel
from graph.kernel.errors import Forbidden
from tests.helpers import mock_store


def test_halt_and_resume_follow_the_execution_policy():
    store = mock_store()
    kernel = Kernel(store, env={})
    with pytest.raises(Forbidden, match="execution is disabled over http"):
        kernel.call("broker_halt", {"by": "mallory"}, transport="http")
    assert store.db["broker_control"].find_one({"_id": "halt"}) is None
    out = kernel.call("broker_halt", {"by": "ops", "reason": "drill"}, transport="cli")
    assert out.halted and out.by == "ops"
    allowed = Kernel(store, env={"TRADEGRAPH_ALLOW_EXECUTION": "http"})
    back = allowed.call("broker_resume", {"by": "ops"}, transport="http")
    assert back.halted is False and back.by == "ops (via http)"
    log = [e["payload"] for e in store.events.read("broker-control")]
    assert [(p["action"], p["by"]) for p in log] == [("halt", "ops"), ("resume", "ops (via http)")]
    assert log[0]["reason"] == "drill"
