"""Idempotency keys on the capabilities that start something (run_cycle, approve, start_backtest, start_sweep,
start_benchmark), for every transport: HTTP's `Idempotency-Key` header, MCP's and the Python client's `idempotency_key`
argument.

- The first request with a key runs; its answer (the output, or the kernel error it raised) is stored
  (database/idempotency.py) with a fingerprint of the request: sha256 of the capability and its validated input,
  so key order, spacing and defaults left out do not make two requests differ.
- A retry with the same key and the same request gets that answer again and starts nothing.
- A duplicate that arrives while the first still runs waits for it (up to `wait_s`) and gets its answer: a storm of
  retries all get the first's answer. Still running after `wait_s`: Conflict (409), retry later.
- The same key with another request: BadInput (422), as the draft says.
- A first run cut off before it answered (the store went away, its server died): Conflict (409) for every later
  use, since it may have run in part: read the session, then use a new key. Never run again under the same key.
- Keys are scoped per session when the request names one (run_cycle with session_id, approve), else per caller:
  the transport and, over HTTP, a hash of the bearer token. They live a day (database/idempotency.TTL_S).
- Every use is audited: counted in the key's record, and an `idempotency` event in the session's log when the
  answer names a session (in the cycle it started or decided; else the session's last cycle).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Optional

from pydantic import BaseModel, TypeAdapter, ValidationError

from graph.kernel import errors as E
from graph.kernel.models import IdempotencyKey

log = logging.getLogger(__name__)
WAIT_S = 300.0
POLL_S = 0.2
_KEY = TypeAdapter(IdempotencyKey)


def call_once(
    store,
    cap,
    inp: BaseModel,
    run: Callable[[], BaseModel],
    *,
    key: Any,
    transport: str,
    caller: Optional[str] = None,
    wait_s: float = WAIT_S,
) -> BaseModel:
    """`run()` at most once per (scope, key): its answer, or the first run's answer again."""
    from database.idempotency import IdempotencyKeys

    key = _checked(key, cap)
    keys = IdempotencyKeys(store.db)
    fp = fingerprint(cap.name, inp)
    deadline = time.monotonic() + wait_s
    while True:
        begun = keys.begin(scope_of(inp, transport, caller), key, cap.name, fp)
        if begun.state == "run":
            break
        if begun.state == "busy" and begun.live and time.monotonic() < deadline:
            time.sleep(POLL_S)  # the first is running: its answer is this request's answer
            continue
        use = {"busy": "in_flight" if begun.live else "cut_off"}.get(begun.state, begun.state)
        return _answer_again(store, keys, cap, inp, begun.record, use, key, transport)
    record = begun.record
    try:
        out = run()
    except E.StoreUnavailable:
        keys.abandon(record)  # may have run in part: later uses are told so, never run again
        raise
    except E.KernelError as e:
        _finish(store, keys, cap, inp, record, None, e, key, transport)
        raise
    except BaseException:
        keys.abandon(record)
        raise
    _finish(store, keys, cap, inp, record, out, None, key, transport)
    return out


def fingerprint(capability: str, inp: BaseModel) -> str:
    body = json.dumps(
        {"capability": capability, "input": inp.model_dump(mode="json")},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def scope_of(inp: BaseModel, transport: str, caller: Optional[str]) -> str:
    session_id = getattr(inp, "session_id", None)
    return f"session:{session_id}" if session_id else f"caller:{transport}:{caller or 'anonymous'}"


def caller_of_token(authorization: Optional[str]) -> Optional[str]:
    """An HTTP caller named by its bearer token's hash (the token itself is never stored)."""
    if not authorization:
        return None
    return hashlib.sha256(authorization.strip().encode()).hexdigest()[:16]


def _checked(key: Any, cap) -> str:
    try:
        key = _KEY.validate_python(key)
    except ValidationError as e:
        line, _ = E.validation_line(e)
        raise E.BadInput(f"idempotency_key: {line.removeprefix('input: ')}", field="idempotency_key") from None
    if not cap.keyed:
        raise E.BadInput(
            f"idempotency_key: {cap.name} takes none (it starts nothing a retry would start again)",
            field="idempotency_key",
        )
    return key


def _finish(
    store,
    keys,
    cap,
    inp,
    record: dict,
    out: Optional[BaseModel],
    err: Optional[E.KernelError],
    key: str,
    transport: str,
) -> None:
    """Store the first answer (the caller gets it whatever happens here) and audit the key's first use."""
    session_id, cycle_id = _session_of(out, inp)
    status = "ok" if err is None else err.kind
    response = out.model_dump_json() if out is not None else json.dumps(err.to_dict() if err is not None else {})
    try:
        keys.finish(record, status, response, session_id, cycle_id)
    except Exception as e:  # noqa: BLE001 - the store went away after the run: later uses read it as cut off
        keys.abandon(record)
        log.warning("idempotency key %r: its answer could not be stored: %s", key, e)
        return
    _audit(
        store,
        session_id,
        cycle_id,
        key=key,
        use="first",
        capability=cap.name,
        transport=transport,
        status=status,
        fingerprint=record["fingerprint"],
    )


def _answer_again(store, keys, cap, inp, record: dict, use: str, key: str, transport: str) -> BaseModel:
    """A later use of the key: the first answer (a repeat), or the one-line refusal saying why not."""
    try:
        keys.used(record, use)
    except Exception as e:  # noqa: BLE001 - the answer does not depend on the count
        log.warning("idempotency key %r: its use could not be counted: %s", key, e)
    first_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(record.get("created_at") or 0)))
    session_id = record.get("session_id") or getattr(inp, "session_id", None)
    _audit(
        store,
        session_id,
        record.get("cycle_id"),
        key=key,
        use=use,
        capability=cap.name,
        transport=transport,
        status=record.get("status"),
        fingerprint=fingerprint(cap.name, inp),
        first_fingerprint=record.get("fingerprint"),
        first_at=first_at,
    )
    named = f"Idempotency-Key {key!r} (first used at {first_at} for {record.get('capability')})"
    if use == "mismatch":
        raise E.BadInput(
            f"{named} was used for a different request: a new request needs a new key", field="idempotency_key"
        )
    if use == "in_flight":
        raise E.Conflict(
            f"{named} is still running: retry later with the same key to get its answer", field="idempotency_key"
        )
    if use == "cut_off":
        raise E.Conflict(
            f"{named} was cut off before it answered and may have run in part: read its session's "
            f"state before retrying with a new key",
            field="idempotency_key",
        )
    if record.get("status") == "ok":
        return cap.output_model.model_validate_json(record["response"])
    body = json.loads(record["response"])
    raise E.BY_KIND.get(body.get("error"), E.Failed)(body.get("message") or "", field=body.get("field"))


def _session_of(out: Optional[BaseModel], inp: BaseModel) -> tuple[Optional[str], Optional[str]]:
    """The session and cycle the answer is about: a cycle's output names both; an approve refused names its
    session (its last cycle stands for it); a task starts none yet."""
    session_id = getattr(out, "session_id", None) or getattr(inp, "session_id", None)
    return session_id, getattr(out, "cycle_id", None)


def _audit(store, session_id: Optional[str], cycle_id: Optional[str], *, key: str, **use: Any) -> None:
    """One `idempotency` event in the session's log (none without a session): written like a telemetry event,
    after the cycle it is about. A store that does not take it costs the event, never the answer."""
    if session_id is None:
        return
    from schemas.events import IdempotencyPayload, new_event  # here: the kernel loads without the event models

    try:
        payload = IdempotencyPayload(key=key, **use)  # the fields given, as given (exclude_unset below)
        cycle_id = cycle_id or (store.events.cycle_ids(session_id) or [None])[-1]
        if cycle_id is None:
            return
        with store.writer(background=False) as writer:
            writer.put(new_event(session_id, cycle_id, "RUNNER", "idempotency", payload.model_dump(exclude_unset=True)))
    except Exception as e:  # noqa: BLE001
        log.warning("idempotency key %r: its use could not be audited in session %s: %s", key, session_id, e)
