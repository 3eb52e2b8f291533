"""The kernel `tradegraph serve` runs: one that reconnects to a store whose server moved or failed."""

from __future__ import annotations

from typing import Optional

from graph.kernel.core import Kernel
from graph.kernel.errors import StoreUnavailable, translate


class ReconnectingKernel(Kernel):
    """`serve`'s kernel. A server process outlives its embedded store's server: before a request, a store whose
    server moved (stopped, or back on another port: `store stop` + `store start`, a killed server restarted) or
    on which the last request failed is reconnected (database.connection.Store.reconnect). The request after
    the store is back succeeds, with no restart of `serve` and no polling."""

    def __init__(self, store, **options):
        super().__init__(store, **options)
        self._failed_on: Optional[int] = None  # the store generation a request last failed on

    def _reconnect_if_needed(self) -> int:
        seen = self.store.generation
        if self._failed_on == seen or self.store.moved():
            try:
                self.store.reconnect(seen)
            except Exception as e:  # noqa: BLE001 - still no server: this request fails like the last one
                raise translate(e) from None
            self._failed_on = None
        return self.store.generation

    def call(self, name, args=None, *, transport: str = "local"):
        seen = self._reconnect_if_needed()
        try:
            return super().call(name, args, transport=transport)
        except StoreUnavailable:
            self._failed_on = seen
            raise

    def call_keyed(self, name, args=None, *, transport: str = "local", idempotency_key=None, caller=None):
        """A keyed request reads and writes its key in the store before it runs (graph/kernel/idempotent.py): it
        reconnects first too, or every keyed request after a restart would fail until an unkeyed one ran."""
        seen = self._reconnect_if_needed()
        try:
            return super().call_keyed(name, args, transport=transport, idempotency_key=idempotency_key, caller=caller)
        except StoreUnavailable:
            self._failed_on = seen
            raise

    def watch(self, task_id: str, **options):
        seen = self._reconnect_if_needed()
        try:
            yield from super().watch(task_id, **options)
        except StoreUnavailable:
            self._failed_on = seen
            raise
