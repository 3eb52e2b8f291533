"""The Kernel: one store, the capability registry, the task manager and each transport's policy.

`Kernel.call(name, args, transport=...)` is the only way in for every transport: it validates the input
against the capability's model, applies the transport's policy (inside the capability), runs it, and maps
any exception onto the five kernel errors in one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Optional, cast

from pydantic import BaseModel, ValidationError

from graph.kernel.capabilities import CAPABILITIES, Capability, Context
from graph.kernel.errors import BadInput, KernelError, NotFound, translate, validation_line
from graph.kernel.idempotent import WAIT_S, call_once
from graph.kernel.models import TaskInput, TaskView
from graph.kernel.policy import TRANSPORTS, Policy
from graph.kernel.tasks import TaskManager


def default_services_factory(memory: Optional[str] = None, data=None):
    """Fresh services per call (they bind its execution backend to a store) on the bundled samples or the
    user's files `data` (agent.data.sources.DataFiles); what it reads is cached per file version, so this is cheap."""
    from agent.config import command_config
    from graph.machine.cycle_context import default_services

    return default_services(command_config(memory=memory), data=data)


class Kernel:
    def __init__(
        self,
        store,
        *,
        runtime_factory: Optional[Callable[..., Any]] = None,
        experiments_dir: str | Path | None = None,
        env: Optional[Mapping[str, str]] = None,
        task_options: Optional[dict] = None,
        idempotency_wait_s: float = WAIT_S,
    ):
        self.store = store
        # how long a duplicate keyed request waits for the first one's answer before it is told to retry later
        self.idempotency_wait_s = idempotency_wait_s
        self.runtime_factory = runtime_factory or default_services_factory
        env = os.environ if env is None else env
        # read once at start: a policy does not change under a running server
        self.policies = {t: Policy.for_transport(t, env) for t in TRANSPORTS}
        # no store: only the capabilities that read none (features, contract_schemas) can run, as the CLI does
        if experiments_dir is None:  # the runs folder under the home, the same from every folder (kernel/runs.py)
            from graph.kernel.runs import runs_dir

            experiments_dir = runs_dir(env)
        self.tasks = (
            TaskManager(store, self.runtime_factory, experiments_dir, **(task_options or {}))
            if store is not None
            else None
        )
        if store is not None:
            from database.idempotency import IdempotencyKeys

            IdempotencyKeys(store.db).ensure_indexes()  # the keys' TTL: they live a day

    @classmethod
    def open(cls, uri: Optional[str] = None, **options: Any) -> Kernel:
        from database.connection import connect

        try:
            return cls(connect(uri), **options)
        except Exception as e:  # noqa: BLE001 - mapped like every other error
            raise translate(e) from None

    def close(self) -> None:
        self.store.close()

    @staticmethod
    def capabilities() -> dict[str, Capability]:
        return dict(CAPABILITIES)

    def call(self, name: str, args: Any = None, *, transport: str = "local") -> BaseModel:
        cap = self.capability(name)
        inp = self.parse(cap, args)
        ctx = Context(
            store=self.store, policy=self.policies[transport], tasks=self.tasks, services=self.runtime_factory
        )
        try:
            return cap.fn(ctx, inp)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - the one place exceptions become kernel errors
            raise self._naming_deletion(translate(e), inp) from None

    def _naming_deletion(self, err: KernelError, inp: BaseModel) -> KernelError:
        """Every capability's `unknown session 'X'` (read_events, portfolio, approve, run_cycle on a session, …) says
        when and by whom X was deleted, as the admin log records it: here once, not in each capability."""
        session_id = getattr(inp, "session_id", None)
        if not (
            isinstance(err, NotFound)
            and err.field == "session_id"
            and session_id
            and self.store is not None
            and err.message == f"unknown session '{session_id}'"
        ):
            return err
        try:
            return NotFound(self.store.admin_log.unknown_session(session_id), field="session_id")
        except Exception:  # noqa: BLE001 - the admin log unreadable: the plain answer still stands
            return err

    def call_keyed(
        self,
        name: str,
        args: Any = None,
        *,
        transport: str = "local",
        idempotency_key: Optional[str] = None,
        caller: Optional[str] = None,
    ) -> BaseModel:
        """call(), at most once per idempotency key (a capability that starts something): a retry with the key gets
        the first answer (graph/kernel/idempotent.py). `caller` tells apart the keys of requests without a session.
        The run itself goes through call(), so a subclass's call (serve's reconnecting kernel) applies to it."""
        if idempotency_key is None:
            return self.call(name, args, transport=transport)
        cap = self.capability(name)
        inp = self.parse(cap, args)
        try:
            return call_once(
                self.store,
                cap,
                inp,
                lambda: self.call(name, inp, transport=transport),
                key=idempotency_key,
                transport=transport,
                caller=caller,
                wait_s=self.idempotency_wait_s,
            )
        except KernelError:
            raise
        except Exception as e:  # noqa: BLE001 - the key's own store reads and writes
            raise translate(e) from None

    @staticmethod
    def capability(name: str) -> Capability:
        cap = CAPABILITIES.get(name)
        if cap is None:
            raise NotFound(f"unknown capability '{name}' (known: {', '.join(CAPABILITIES)})", field="name")
        return cap

    def watch(self, task_id: str, *, poll_s: float = 0.5, timeout_s: Optional[float] = None) -> Iterator[TaskView]:
        """task_status each time it changes, ending with a terminal status: the SSE stream's source."""
        inp = cast(TaskInput, self.parse(CAPABILITIES["task_status"], {"task_id": task_id}))
        assert self.tasks is not None, "tasks live in a store: this kernel was opened without one"
        try:
            yield from self.tasks.updates(inp.task_id, poll_s=poll_s, timeout_s=timeout_s)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except Exception as e:  # noqa: BLE001
            raise translate(e) from None

    @staticmethod
    def parse(cap: Capability, args: Any) -> BaseModel:
        if isinstance(args, cap.input_model):
            return args
        if isinstance(args, BaseModel):
            args = args.model_dump()
        try:
            return cap.input_model.model_validate(args or {})
        except ValidationError as e:
            line, field = validation_line(e)
            raise BadInput(line, field=field) from None
