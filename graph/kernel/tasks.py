"""Long work as stored tasks: a backtest runs in a thread of the serving process, and its document in the
`tasks` collection (same store as the audit log) is what every process and transport reads.

Status: queued → running → succeeded | failed | cancelled. `interrupted` is never written: it is what a
queued or running task reads as once its owner is gone (its pid is dead on this host, or its heartbeat is
stale), so a crash needs no clean-up to be seen. Cancellation is cooperative: the flag in the document is
read after every decision point (run_backtest's on_step), and raising there leaves the run resumable.
Resuming runs run_backtest again with the same run id, which continues after the last logged point.
A store that goes away under a task ends it `failed` (or, when not even that can be written, the task reads
`interrupted` once its thread is gone): resumable either way, and never a crash on a closed client.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import PyMongoError

from database.embedded import pid_alive
from graph.kernel.errors import Conflict, NotFound, translate
from graph.kernel.models import Artifact, ArtifactsOutput, TaskProgress, TaskView
from graph.services.run_files import run_file_exists

COLLECTION = "tasks"
ACTIVE = ("queued", "running")
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")
RESUMABLE = ("interrupted", "cancelled", "failed")
HOST = socket.gethostname()

# task id -> its worker thread, for every TaskManager of this process: a task owned by this pid is alive
# only while its thread is
_LIVE: dict[str, threading.Thread] = {}
_LIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class TaskKind:
    """What the manager needs of a kind of task (backtest, sweep, benchmark), each defined in its own module above
    this one, which registers it: how to resume one from its document (planned and refused before the claim: the
    worker's target and its arguments) and which files and figures it leaves in its folder."""

    name: str
    resume: Callable[[TaskManager, dict], tuple[Callable[..., None], tuple]]
    artifacts: Callable[[dict, Optional[Path]], tuple[list[tuple[str, str]], Optional[dict]]]


KINDS: dict[str, TaskKind] = {}


def register(kind: TaskKind) -> TaskKind:
    KINDS[kind.name] = kind
    return kind


def kind_of(name: str) -> TaskKind:
    if name not in KINDS:  # its module was not imported: graph/kernel/capabilities.py imports every kind
        raise NotFound(f"unknown task kind '{name}' (known: {', '.join(sorted(KINDS)) or 'none loaded'})", field="kind")
    return KINDS[name]


def new_task_id() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


class TaskCancelled(Exception):
    """Raised inside on_step to stop a run between decision points."""


class TaskManager:
    def __init__(
        self,
        store,
        runtime_factory: Callable[[Optional[str]], Any],
        experiments_dir: str | Path,
        *,
        heartbeat_s: float = 5.0,
        stale_s: float = 60.0,
    ):
        self.store, self.runtime_factory = store, runtime_factory
        self.experiments = Path(experiments_dir).expanduser().resolve()
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.col.create_index([("created_at", DESCENDING)])
        self.col.create_index("run_id")

    @property
    def col(self):
        # read through the store each time: a store reconnected to a server on another port has a new client
        return self.store.db[COLLECTION]

    # ------------------------------------------------------------ reads
    def _doc(self, task_id: str) -> dict:
        doc = self.col.find_one({"_id": task_id})
        if doc is None:
            raise NotFound(f"unknown task '{task_id}'", field="task_id")
        return doc

    def owner_alive(self, doc: dict) -> bool:
        owner = doc.get("owner") or {}
        if owner.get("host") == HOST:
            if owner.get("pid") == os.getpid():
                with _LIVE_LOCK:
                    thread = _LIVE.get(doc["_id"])
                return thread is not None and thread.is_alive()
            if not pid_alive(int(owner.get("pid") or 0)):
                return False
        # another host (or a live pid that may have been reused): only the heartbeat can tell
        return time.time() - float(doc.get("heartbeat_at") or doc.get("created_at") or 0) < self.stale_s

    def view(self, doc: dict) -> TaskView:
        status = doc["status"]
        if status in ACTIVE and not self.owner_alive(doc):
            # the owner may have ended after `doc` was read: a task's last status is written before its thread ends
            # (or its process exits), so the document read now holds it if there is one. Without this re-read, a
            # task finishing while its follower's read was in flight showed `interrupted` (the flaky StockBench-on-
            # Ray run under load), a status it never had
            doc = self.col.find_one({"_id": doc["_id"]}) or doc
            status = doc["status"]
            if status in ACTIVE and not self.owner_alive(doc):
                status = "interrupted"
        return TaskView(
            task_id=doc["_id"],
            kind=doc["kind"],
            status=status,
            progress=TaskProgress(**(doc.get("progress") or {})),
            params=doc.get("params") or {},
            run_id=doc.get("run_id"),
            run_dir=doc.get("run_dir"),
            owner=doc.get("owner") or {},
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
            heartbeat_at=doc.get("heartbeat_at"),
            cancel_requested=bool(doc.get("cancel_requested")),
            error=doc.get("error"),
            resumable=status in RESUMABLE,
            summary=doc.get("summary"),
        )

    def status(self, task_id: str) -> TaskView:
        return self.view(self._doc(task_id))

    def list(self, limit: int = 20) -> list[TaskView]:
        return [self.view(d) for d in self.col.find({}).sort("created_at", DESCENDING).limit(int(limit))]

    def updates(self, task_id: str, poll_s: float = 0.5, timeout_s: Optional[float] = None) -> Iterator[TaskView]:
        """The task's view each time it changes, ending with a terminal one (or at timeout_s)."""
        last, deadline = None, None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            v = self.status(task_id)
            key = (v.status, v.updated_at, v.progress.done)
            if key != last:
                last = key
                yield v
            if v.status in TERMINAL or (deadline is not None and time.monotonic() > deadline):
                return
            time.sleep(poll_s)

    def join(self, task_id: str, timeout_s: Optional[float] = None) -> None:
        """Wait for this process's worker of the task to end (a foreground caller closes the store after)."""
        with _LIVE_LOCK:
            thread = _LIVE.get(task_id)
        if thread is not None:
            thread.join(timeout_s)

    def artifacts(self, task_id: str) -> ArtifactsOutput:
        doc = self._doc(task_id)
        run_dir = Path(doc["run_dir"]) if doc.get("run_dir") else None
        files, metrics = kind_of(doc["kind"]).artifacts(doc, run_dir)
        found = []
        for name, media in files:
            p = run_dir / name if run_dir else None
            # a link planted in the run folder is refused naming it, never listed (or served) as the run's file
            if p is not None and run_file_exists(p):
                found.append(Artifact(name=name, path=str(p), bytes=p.lstat().st_size, media_type=media))
        return ArtifactsOutput(
            task_id=task_id, run_dir=str(run_dir) if run_dir else None, artifacts=found, metrics=metrics
        )

    # ------------------------------------------------------------ writes
    def refuse_busy(self, run_id: str, what: str, field: str) -> None:
        """One task at a time per run id: another active one is a conflict naming it."""
        busy = [
            v
            for v in (self.view(d) for d in self.col.find({"run_id": run_id, "status": {"$in": list(ACTIVE)}}))
            if v.status in ACTIVE
        ]
        if busy:
            raise Conflict(f"{what} '{run_id}' is already being run by task {busy[0].task_id}", field=field)

    def create(
        self, kind: str, inp, run_id: str, run_dir: str | Path, progress: dict[str, Any], task_id: Optional[str] = None
    ) -> str:
        """The task's document, queued and owned by this process; its id."""
        now = time.time()
        task_id = task_id or new_task_id()
        self.col.insert_one(
            {
                "_id": task_id,
                "kind": kind,
                "status": "queued",
                "params": inp.model_dump(mode="json"),
                "run_id": run_id,
                "run_dir": str(run_dir),
                "owner": self.me(),
                "created_at": now,
                "updated_at": now,
                "heartbeat_at": now,
                "cancel_requested": False,
                "progress": progress,
                "error": None,
                "summary": None,
            }
        )
        return task_id

    def cancel(self, task_id: str) -> TaskView:
        v = self.status(task_id)
        if v.status in ("succeeded", "failed", "cancelled"):
            raise Conflict(f"task {task_id} already {v.status}: nothing to cancel", field="task_id")
        now = time.time()
        if v.status == "interrupted":  # no thread will read the flag: settle it here
            self.col.update_one(
                {"_id": task_id}, {"$set": {"status": "cancelled", "cancel_requested": True, "updated_at": now}}
            )
        else:
            self.col.update_one({"_id": task_id}, {"$set": {"cancel_requested": True, "updated_at": now}})
        return self.status(task_id)

    def resume(self, task_id: str) -> TaskView:
        doc = self._doc(task_id)
        v = self.view(doc)
        if not v.resumable:
            raise Conflict(
                f"task {task_id} is {v.status}: only an interrupted, cancelled or failed task can be resumed",
                field="task_id",
            )
        target, args = kind_of(doc["kind"]).resume(self, doc)  # refused here, before the claim, as at start
        # compare-and-set on what was read: two processes resuming the same task, one wins
        claimed = self.col.find_one_and_update(
            {
                "_id": task_id,
                "status": doc["status"],
                "updated_at": doc["updated_at"],
                **{f"owner.{k}": v for k, v in (doc.get("owner") or {}).items()},
            },
            {
                "$set": {
                    "status": "queued",
                    "owner": self.me(),
                    "cancel_requested": False,
                    "error": None,
                    "updated_at": time.time(),
                    "heartbeat_at": time.time(),
                }
            },
            return_document=ReturnDocument.AFTER,
        )
        if claimed is None:
            raise Conflict(f"task {task_id} changed while resuming it (another process resumed it?)", field="task_id")
        self.start_thread(task_id, target, args)
        return self.status(task_id)

    # ------------------------------------------------------------ the worker
    def me(self) -> dict:
        return {"host": HOST, "pid": os.getpid()}

    def start_thread(self, task_id: str, target, args: tuple) -> None:
        thread = threading.Thread(target=target, args=args, name=f"task-{task_id}", daemon=True)
        with _LIVE_LOCK:
            _LIVE[task_id] = thread
        thread.start()

    def set(self, task_id: str, **fields: Any) -> Optional[dict]:
        fields["updated_at"] = fields["heartbeat_at"] = time.time()
        return self.col.find_one_and_update({"_id": task_id}, {"$set": fields}, return_document=ReturnDocument.AFTER)

    @contextlib.contextmanager
    def lifecycle(self, task_id: str) -> Iterator[None]:
        """Around a task's body: its heartbeat; a cancel ends it `cancelled`, any other exception `failed` with the
        error (a task never dies silently); and its worker leaves _LIVE however it ends. A store that is gone or
        closed can't take the final status: the task then reads `interrupted`, its thread being gone, resumable."""
        stop_beat = threading.Event()
        threading.Thread(target=self._heartbeat, args=(task_id, stop_beat), daemon=True).start()
        try:
            yield
        except TaskCancelled:
            self.set_final(task_id, status="cancelled", finished_at=time.time())
        except BaseException as e:  # noqa: BLE001 - its document says why
            err = translate(e)
            self.set_final(task_id, status="failed", finished_at=time.time(), error=f"{err.kind}: {err.message}")
        finally:
            stop_beat.set()
            with _LIVE_LOCK:
                _LIVE.pop(task_id, None)

    def set_final(self, task_id: str, **fields: Any) -> None:
        try:
            self.set(task_id, **fields)
        except PyMongoError:  # the store is gone (or closed): the document can't say it, the dead thread does
            pass

    def _heartbeat(self, task_id: str, stop: threading.Event) -> None:
        # a cycle can take longer than the staleness window with a networked model: beat independently
        while not stop.wait(self.heartbeat_s):
            try:
                self.col.update_one(
                    {"_id": task_id, "status": {"$in": list(ACTIVE)}}, {"$set": {"heartbeat_at": time.time()}}
                )
            except Exception:  # noqa: BLE001 - a missed beat only makes the task look stale sooner
                pass
