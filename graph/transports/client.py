"""The Python client: one method per capability, the same signatures in-process and over HTTP.

    from graph.transports.client import Client
    c = Client.local()                                  # in this process, on $MONGODB_URI / the embedded store
    c = Client.http("http://127.0.0.1:8000", token=None)  # a `tradegraph serve` elsewhere
    out = c.run_cycle(["AAPL", "MSFT"], "2012-06-01")
    c.read_events(out.session_id, kind="contract").events
    c.call("read_events", session_id=out.session_id)    # the same, by the capability's name

The methods are derived from the capability registry, not written here, so a new capability is a method at once:
`c.<name>(...)` takes the input model's fields (its path parameters and other required fields positionally, in
that order; the optional ones by keyword, defaulting to the model's defaults) and returns the output model;
`help(c.run_cycle)` shows the signature and the capability's description.

Both raise the kernel's errors (BadInput, NotFound, Conflict, Forbidden, StoreUnavailable, Failed). Over HTTP the
errors are rebuilt from the response's {error, message}. The capabilities that start something (run_cycle,
approve, start_backtest, start_sweep, start_benchmark: `keyed` in the registry) take an `idempotency_key`:
retrying with the same key gets the first answer and starts nothing again (graph/kernel/idempotent.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from inspect import Parameter, Signature
from typing import Any, Optional

from pydantic import BaseModel

from graph.kernel import errors as E
from graph.kernel import models as m
from graph.kernel.capabilities import CAPABILITIES, Capability
from graph.transports import routes

IDEMPOTENCY_ARG = "idempotency_key"  # not a field of the input model: the kernel takes it beside the input


class _Local:
    def __init__(self, kernel, owned: bool):
        self.kernel, self.owned = kernel, owned

    def call(self, name: str, args: dict, idempotency_key: Optional[str] = None) -> BaseModel:
        return self.kernel.call_keyed(name, args, transport="local", idempotency_key=idempotency_key)

    def watch(self, task_id: str, poll_s: float) -> Iterator[m.TaskView]:
        return self.kernel.watch(task_id, poll_s=poll_s)

    def close(self) -> None:
        if self.owned:
            self.kernel.close()


class _Http:
    def __init__(self, base_url: str, token: Optional[str], timeout_s: float):
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)

    def call(self, name: str, args: dict, idempotency_key: Optional[str] = None) -> BaseModel:
        cap = CAPABILITIES[name]
        path, params, body = routes.request(cap, args)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        r = self.http.request(cap.http.method, path, json=body, params=params, headers=headers)
        return cap.output_model.model_validate(self._json(r))

    def watch(self, task_id: str, poll_s: float) -> Iterator[m.TaskView]:
        with self.http.stream("GET", routes.TASK_EVENTS.format(task_id=task_id), timeout=None) as r:
            if r.status_code != 200:
                r.read()
                self._json(r)
            event = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if event == "error":
                        raise E.BY_KIND.get(data.get("error"), E.Failed)(data.get("message"), field=data.get("field"))
                    yield m.TaskView.model_validate(data)

    @staticmethod
    def _json(r) -> Any:
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code >= 400:
            data = data if isinstance(data, dict) else {}
            cls = E.BY_KIND.get(str(data.get("error")), E.StoreUnavailable if r.status_code == 503 else E.Failed)
            raise cls(data.get("message") or f"HTTP {r.status_code}: {r.text[:200]}", field=data.get("field"))
        return data

    def close(self) -> None:
        self.http.close()


class _CapabilityMethods(type):
    """Client.<capability> (and so c.<capability>): looked up in the registry when asked for, so a capability
    registered after this module loaded is a method too."""

    def __getattr__(cls, name: str) -> Callable[..., Any]:
        cap = CAPABILITIES.get(name) if not name.startswith("_") else None
        if cap is None:
            raise AttributeError(f"'Client' has no attribute '{name}' (capabilities: {', '.join(CAPABILITIES)})")
        return method(cap)

    def __dir__(cls) -> list[str]:
        return sorted({*super().__dir__(), *CAPABILITIES})


class Client(metaclass=_CapabilityMethods):
    def __init__(self, backend):
        self._b = backend

    @classmethod
    def local(cls, store=None, *, uri: Optional[str] = None, kernel=None, **kernel_options: Any) -> Client:
        """In this process: on `kernel`, or a Kernel over `store`, or over a store opened from `uri`."""
        from graph.kernel.core import Kernel

        if kernel is not None:
            return cls(_Local(kernel, owned=False))
        if store is not None:
            return cls(_Local(Kernel(store, **kernel_options), owned=False))
        return cls(_Local(Kernel.open(uri, **kernel_options), owned=True))

    @classmethod
    def http(cls, base_url: str, token: Optional[str] = None, *, timeout_s: float = 600.0) -> Client:
        """Over HTTP to `tradegraph serve`; a cycle can take minutes with a networked model."""
        return cls(_Http(base_url, token, timeout_s))

    def close(self) -> None:
        self._b.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, name: str, /, *, idempotency_key: Optional[str] = None, **args: Any) -> Any:
        """The capability `name` with these input fields; its output model (a keyed capability takes a key)."""
        cap = CAPABILITIES.get(name)
        if cap is None:
            raise E.NotFound(f"unknown capability '{name}' (known: {', '.join(CAPABILITIES)})", field="name")
        if idempotency_key is not None and not cap.keyed:
            raise TypeError(f"{name} starts nothing: it takes no {IDEMPOTENCY_ARG}")
        return self._b.call(name, args, idempotency_key)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(type(self), name).__get__(self, type(self))

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *CAPABILITIES})

    def watch_task(self, task_id: str, poll_s: float = 0.5) -> Iterator[m.TaskView]:
        """task_status each time it changes, until it ends (over HTTP: the SSE stream)."""
        return self._b.watch(task_id, poll_s)


@functools.cache
def method(cap: Capability) -> Callable[..., Any]:
    """The client's method for a capability, its signature derived from the input model: the path parameters and
    the other required fields positionally (the path's first: `features("AAPL", "2012-06-01")`), the optional ones
    by keyword with the model's defaults, and `idempotency_key` on a keyed capability. Only the arguments given are
    sent: the model's defaults apply to the rest, on the kernel's side."""
    fields = cap.input_model.model_fields
    path = cap.http.path_params
    first = path + [n for n, f in fields.items() if f.is_required() and n not in path]
    params = [Parameter("self", Parameter.POSITIONAL_ONLY)]
    params += [Parameter(n, Parameter.POSITIONAL_OR_KEYWORD, annotation=fields[n].annotation) for n in first]
    params += [
        Parameter(n, Parameter.KEYWORD_ONLY, annotation=f.annotation, default=f.get_default(call_default_factory=True))
        for n, f in fields.items()
        if n not in first
    ]
    if cap.keyed:
        params.append(Parameter(IDEMPOTENCY_ARG, Parameter.KEYWORD_ONLY, default=None, annotation=Optional[str]))
    signature = Signature(params, return_annotation=cap.output_model)

    def call(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind(*args, **kwargs).arguments  # a wrong or missing argument: TypeError, as for any method
        client = given.pop("self")
        return client.call(cap.name, **given)

    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__name__, call.__qualname__ = cap.name, f"Client.{cap.name}"
    call.__doc__ = (
        f"{cap.description}\n\nInput: graph.kernel.models.{cap.input_model.__name__}; returns "
        f"{cap.output_model.__name__}."
    )
    return call
