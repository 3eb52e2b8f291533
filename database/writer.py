"""Buffered, ordered, off-thread writes of audit events."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any, Optional

from pymongo.errors import ConnectionFailure, PyMongoError

from database.errors import AuditSpooled
from database.events import EventStore
from database.spool import SpoolFile

MAX_BATCH = 1000
# continuous writing: once something is queued the drainer lets up to GATHER_MAX events gather for at most
# GATHER_S before it writes (measured on a 4-symbol cycle on the embedded store, 215 events: batches of ~64 beat
# one per event, whose per-command cost doubled the server's work, and beat one big batch at the barrier, whose
# whole insert the cycle then waited for)
GATHER_S = 0.02
GATHER_MAX = 64
# waits before the retries of an append whose connection dropped (a blip, a failover)
NETWORK_RETRY_WAITS = (0.05, 0.25)


class WriterClosed(RuntimeError):
    """put() after close()."""


class BufferedEventWriter:
    """put() is a lock + deque append; a daemon thread appends batches to the EventStore.

    Order: put() order (under one lock) is queue order, and a single drainer takes batches
    from the head, so events get seqs in the order they were put, across threads.
    Failure: the first storage error stops writing to the store (no later event may take a seq
    ahead of a lost one). If the store itself failed (a PyMongoError: connection cut, timeout,
    write concern) and a spool directory is given, the failed batch, everything queued and every
    later put() go to a local spool file, fsynced, and every flush()/close() raises AuditSpooled;
    otherwise the error is re-raised by put(), flush() and close(): nothing is queued silently.
    `flush()` is the durability barrier: it returns only once every event put so far is stored.

    Continuous (the default with a background thread): once something is queued, the drainer lets a batch
    gather (up to `gather_max` events, at most `gather_s`) and writes everything queued by then; while a
    batch is in flight the next one gathers. So the store works while the cycle computes, and a flush waits
    only for the tail. `flush_every` and `linger_s` are unused then. continuous=False keeps the older rule:
    write when `flush_every` are queued, `linger_s` after the last write, or on a flush. Inline
    (background=False) writers store a batch on the put() that fills `flush_every`, and on flush().
    """

    def __init__(
        self,
        events: EventStore,
        *,
        flush_every: int = 64,
        background: bool = True,
        linger_s: float = 0.1,
        spool_dir: Optional[Path] = None,
        target: str = "",
        continuous: bool = True,
        gather_s: float | None = None,
        gather_max: int | None = None,
    ) -> None:
        self.events = events
        self.spool_dir, self.target = spool_dir, target
        self.spool: Optional[SpoolFile] = None
        self.flush_every = max(1, flush_every)
        self.background = background
        self.linger_s = linger_s
        self.continuous = continuous
        self.gather_s = GATHER_S if gather_s is None else gather_s
        self.gather_max = max(1, GATHER_MAX if gather_max is None else gather_max)
        # the queue length at which put() wakes the drainer
        self._wake_at = self.gather_max if (background and continuous) else self.flush_every
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        # held while a batch is taken and stored, so two drainers can't reorder batches
        self._write_lock = threading.Lock()
        self._put = 0  # events accepted
        self._done = 0  # events stored (or given up on after an error)
        self._flush_wanted = False
        self._closed = False
        self._error: BaseException | None = None
        self.failed_batch: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
            self._thread.start()

    # ---- hot path -----------------------------------------------------------------------
    def put(self, event: dict[str, Any]) -> None:
        with self._cond:
            if self._closed:
                raise WriterClosed("BufferedEventWriter.put() after close()")
            if self._error is not None:
                if self.spool is None:
                    raise self._error
                self.spool.write([event])
                return
            self._queue.append(event)
            self._put += 1
            queued = len(self._queue)
            full = queued >= self.flush_every
            if self.background and (queued >= self._wake_at or (self.continuous and queued == 1)):
                self._cond.notify_all()
        if full and not self.background:
            self._drain_once()

    # ---- draining -----------------------------------------------------------------------
    def _drain_once(self) -> bool:
        """Store one batch from the head of the queue; False if nothing was queued or writing has failed."""
        with self._write_lock:
            with self._cond:
                if self._error is not None or not self._queue:
                    return False
                n = min(len(self._queue), MAX_BATCH)
                batch = [self._queue.popleft() for _ in range(n)]
            try:
                self._append_retrying(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to flush(), never swallowed
                with self._cond:
                    self._error = exc
                    self.failed_batch = batch
                    if isinstance(exc, PyMongoError) and self.spool_dir is not None:
                        # the store is gone, the events are not: keep them, in order, on local disk
                        self.spool = SpoolFile(self.spool_dir, self.target)
                        self.spool.write(batch + list(self._queue))
                        self._queue.clear()
                    # unblock flushers: they will see the error
                    self._done = self._put
                    self._cond.notify_all()
                return False
            with self._cond:
                self._done += n
                self._cond.notify_all()
            return True

    def _append_retrying(self, batch: list[dict[str, Any]]) -> None:
        """A dropped connection is retried (appends are idempotent by event_id, so a batch that did land
        before its reply was lost is not stored twice); anything else, or a store still gone, is final."""
        for wait in NETWORK_RETRY_WAITS:
            try:
                self.events.append(batch)
                return
            except ConnectionFailure:
                time.sleep(wait)
        self.events.append(batch)

    def _run(self) -> None:
        urgent = lambda: self._closed or self._flush_wanted or len(self._queue) >= self._wake_at  # noqa: E731
        while True:
            with self._cond:
                if self.continuous:
                    # wait for anything, then let the burst it belongs to gather briefly
                    self._cond.wait_for(lambda: urgent() or bool(self._queue))
                    if self.gather_s > 0 and not urgent():
                        self._cond.wait_for(urgent, timeout=self.gather_s)
                else:
                    # wait for a full batch, a flush/close, or the linger timeout with something queued
                    self._cond.wait_for(urgent, timeout=self.linger_s)
                if self._error is not None or (self._closed and not self._queue):
                    return
                self._flush_wanted = False
            # drain everything queued by now: under steady load batches grow toward MAX_BATCH
            while self._drain_once():
                pass

    def _raise_error(self) -> None:
        if self._error is None:
            return
        if self.spool is not None:
            raise AuditSpooled(
                f"audit store stopped taking events ({type(self._error).__name__}: "
                f"{str(self._error).splitlines()[0][:200] if str(self._error) else ''}); {self.spool.count} event(s) "
                f"kept in {self.spool.path}; `tradegraph store recover` redelivers them",
                spool_path=str(self.spool.path),
                spooled=self.spool.count,
            ) from self._error
        raise self._error

    def flush(self, *, durable: bool = False) -> None:
        """Wait until every event put so far is stored; durable=True also waits for the journal."""
        self._flush()
        if durable:
            try:
                self.events.sync()
            except PyMongoError as exc:
                with self._cond:
                    self._error = exc
                    if self.spool_dir is not None and self.spool is None:
                        # stored but maybe not journaled: spool nothing twice, redelivery is idempotent
                        self.spool = SpoolFile(self.spool_dir, self.target)
                self._raise_error()

    def _flush(self) -> None:
        if not self.background:
            while self._drain_once():
                pass
            self._raise_error()
            return
        with self._cond:
            target = self._put
            self._flush_wanted = True
            self._cond.notify_all()
            while self._done < target and self._error is None:
                if self._thread is not None and not self._thread.is_alive():
                    raise RuntimeError("audit writer thread died with events pending")
                self._cond.wait(timeout=0.5)
        self._raise_error()

    def close(self) -> None:
        try:
            self.flush(durable=True)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join(timeout=10)
            if self.spool is not None:
                self.spool.close()

    def __enter__(self) -> BufferedEventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
