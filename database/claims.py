"""Who holds a claim stored in a document (an approval being decided, a keyed request being answered), and whether
that holder is still at work: the one rule both database/approvals.py and database/idempotency.py read.

A claim records its owner (host, pid) and a token. In this process a claim is live while its token is held here
(a thread is working under it); on this host while its pid is alive; from another host nothing can be seen, so it
is live until `lease_s` after it was taken (never expires when lease_s is None).

A holder stores its outcome before it lets go of the claim, so a reader that finds a claim not live may hold a copy
read before that outcome: it reads the document again (database/idempotency.py) or takes the claim over only while
the document still shows the claimed state (database/approvals.py). tests/unit/test_idempotency_race.py injects it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Optional

HOST = socket.gethostname()
_HELD: set[str] = set()
_LOCK = threading.Lock()


def owner() -> dict[str, Any]:
    return {"host": HOST, "pid": os.getpid()}


def hold(token: str) -> None:
    """Before the claim is written: no thread of this process ever sees its own claim as abandoned."""
    with _LOCK:
        _HELD.add(token)


def drop(token: str) -> None:
    """This process works under `token` no more (done, or its claim could not be written): abandoned if still stored."""
    with _LOCK:
        _HELD.discard(token)


def live(claim: dict[str, Any], *, since: float, lease_s: Optional[float] = None) -> bool:
    from database.embedded import pid_alive

    who = claim.get("owner") or {}
    if who.get("host") == HOST:
        if who.get("pid") == os.getpid():
            with _LOCK:
                return claim.get("token") in _HELD
        return pid_alive(int(who.get("pid") or 0))
    return lease_s is None or time.time() - since < lease_s
