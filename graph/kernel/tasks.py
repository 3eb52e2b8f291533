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
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import PyMongoError

from database.embedded import pid_alive

from graph.kernel.errors import BadInput, Conflict, NotFound, translate
from graph.kernel.models import Artifact, ArtifactsOutput, BacktestInput, SweepInput, TaskProgress, TaskView

COLLECTION = "tasks"
ACTIVE = ("queued", "running")
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")
RESUMABLE = ("interrupted", "cancelled", "failed")
HOST = socket.gethostname()

# task id -> its worker thread, for every TaskManager of this process: a task owned by this pid is alive
# only while its thread is
_LIVE: dict[str, threading.Thread] = {}
_LIVE_LOCK = threading.Lock()

ARTIFACT_FILES = (("config.json", "application/json"), ("episode_log.jsonl", "application/jsonl"),
                  ("trade_history.json", "application/json"), ("result.json", "application/json"),
                  ("equity.png", "image/png"))


class TaskCancelled(Exception):
    """Raised inside on_step to stop a run between decision points."""


class TaskManager:
    def __init__(self, store, runtime_factory: Callable[[Optional[str]], Any], experiments_dir: str | Path,
                 *, heartbeat_s: float = 5.0, stale_s: float = 60.0):
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
            status = "interrupted"
        return TaskView(task_id=doc["_id"], kind=doc["kind"], status=status,
                        progress=TaskProgress(**(doc.get("progress") or {})), params=doc.get("params") or {},
                        run_id=doc.get("run_id"), run_dir=doc.get("run_dir"), owner=doc.get("owner") or {},
                        created_at=doc["created_at"], updated_at=doc["updated_at"],
                        heartbeat_at=doc.get("heartbeat_at"), cancel_requested=bool(doc.get("cancel_requested")),
                        error=doc.get("error"), resumable=status in RESUMABLE,
                        summary=doc.get("summary"))

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
        from graph.sweep.results import SWEEP_FILES

        found, metrics = [], None
        files = SWEEP_FILES if doc["kind"] == "sweep" else ARTIFACT_FILES
        if doc["kind"] == "benchmark":
            from graph.kernel.benchmark_tasks import artifacts

            files, metrics = artifacts(doc)
        for name, media in files:
            p = run_dir / name if run_dir else None
            if p is not None and p.is_file():
                found.append(Artifact(name=name, path=str(p), bytes=p.stat().st_size, media_type=media))
        if doc["kind"] == "sweep" and run_dir is not None and (run_dir / "aggregate.json").is_file():
            metrics = {"aggregate": json.loads((run_dir / "aggregate.json").read_text()), "summary": doc.get("summary")}
        elif doc["kind"] == "backtest" and run_dir is not None and (run_dir / "result.json").is_file():
            res = json.loads((run_dir / "result.json").read_text())
            metrics = {k: res.get(k) for k in ("metrics", "benchmark_metrics", "actions", "cycle_statuses",
                                               "exits", "warnings", "decision_points")}
        return ArtifactsOutput(task_id=task_id, run_dir=str(run_dir) if run_dir else None, artifacts=found,
                               metrics=metrics)

    # ------------------------------------------------------------ writes
    def start_backtest(self, inp: BacktestInput) -> TaskView:
        config, run_id, total, data = self._prepare(inp)
        active = [self.view(d) for d in self.col.find({"run_id": run_id, "status": {"$in": list(ACTIVE)}})]
        busy = [v for v in active if v.status in ACTIVE]
        if busy:
            raise Conflict(f"run '{run_id}' is already being run by task {busy[0].task_id}", field="run_id")
        now = time.time()
        task_id = f"t-{uuid.uuid4().hex[:12]}"
        doc = {"_id": task_id, "kind": "backtest", "status": "queued", "params": inp.model_dump(mode="json"),
               "run_id": run_id, "run_dir": str(self.experiments / run_id), "owner": self._me(),
               "created_at": now, "updated_at": now, "heartbeat_at": now, "cancel_requested": False,
               "progress": {"done": 0, "total": total}, "error": None, "summary": None}
        self.col.insert_one(doc)
        self._launch(task_id, config, run_id, data, inp)
        return self.status(task_id)

    def start_sweep(self, inp: SweepInput) -> TaskView:
        from graph.kernel.sweep_tasks import start_sweep

        return start_sweep(self, inp)

    def start_benchmark(self, inp) -> TaskView:
        from graph.kernel.benchmark_tasks import start_benchmark

        return start_benchmark(self, inp)

    def _plan_sweep(self, inp: SweepInput, sweep_id: str, task_id: str):
        from graph.kernel.sweep_tasks import plan_sweep

        return plan_sweep(self, inp, sweep_id, task_id)

    def _run_sweep(self, task_id: str, plan) -> None:
        from graph.kernel.sweep_tasks import run_sweep_task

        run_sweep_task(self, task_id, plan)

    def cancel(self, task_id: str) -> TaskView:
        v = self.status(task_id)
        if v.status in ("succeeded", "failed", "cancelled"):
            raise Conflict(f"task {task_id} already {v.status}: nothing to cancel", field="task_id")
        now = time.time()
        if v.status == "interrupted":  # no thread will read the flag: settle it here
            self.col.update_one({"_id": task_id}, {"$set": {"status": "cancelled", "cancel_requested": True,
                                                            "updated_at": now}})
        else:
            self.col.update_one({"_id": task_id}, {"$set": {"cancel_requested": True, "updated_at": now}})
        return self.status(task_id)

    def resume(self, task_id: str) -> TaskView:
        doc = self._doc(task_id)
        v = self.view(doc)
        if not v.resumable:
            raise Conflict(f"task {task_id} is {v.status}: only an interrupted, cancelled or failed task "
                           f"can be resumed", field="task_id")
        if doc["kind"] == "benchmark":
            from graph.kernel.benchmark_tasks import resume_plan, run_benchmark_task

            plan = resume_plan(self, doc)
        elif doc["kind"] == "sweep":
            plan = self._plan_sweep(SweepInput.model_validate(doc["params"]), sweep_id=doc["run_id"],
                                    task_id=task_id)
        else:
            inp = BacktestInput.model_validate(doc["params"])
            config, run_id, _, data = self._prepare(inp, run_id=doc["run_id"])
        # compare-and-set on what was read: two processes resuming the same task, one wins
        claimed = self.col.find_one_and_update(
            {"_id": task_id, "status": doc["status"], "updated_at": doc["updated_at"],
             **{f"owner.{k}": v for k, v in (doc.get("owner") or {}).items()}},
            {"$set": {"status": "queued", "owner": self._me(), "cancel_requested": False, "error": None,
                      "updated_at": time.time(), "heartbeat_at": time.time()}}, return_document=ReturnDocument.AFTER)
        if claimed is None:
            raise Conflict(f"task {task_id} changed while resuming it (another process resumed it?)", field="task_id")
        if doc["kind"] == "benchmark":
            self._start_thread(task_id, run_benchmark_task, (self, task_id, plan))
        elif doc["kind"] == "sweep":
            self._start_thread(task_id, self._run_sweep, (task_id, plan))
        else:
            self._launch(task_id, config, run_id, data, inp)
        return self.status(task_id)

    # ------------------------------------------------------------ the worker
    def _me(self) -> dict:
        return {"host": HOST, "pid": os.getpid()}

    def _prepare(self, inp: BacktestInput, run_id: Optional[str] = None):
        """Everything that can be refused is refused here, before a task exists."""
        from graph.backtest.loop import decision_dates, validate_config
        from graph.runner import parse_symbols
        from schemas.simulation import EpisodeConfig

        run_id = run_id or inp.run_id or f"bt-{uuid.uuid4().hex[:8]}"
        config = EpisodeConfig(episode_id=run_id, tickers=parse_symbols(inp.symbols), initial_cash=inp.capital,
                               start=inp.start, end=inp.end, every=inp.every, fees_bps=inp.fees_bps,
                               slippage_bps=inp.slippage_bps, market=inp.market, memory=inp.memory)
        data = self._data(inp, run_id)
        market = self.runtime_factory(None, data).market
        for t in config.tickers:  # an unknown symbol names the prices file searched
            market._check(t)
        validate_config(config, market)
        cfg_path = self.experiments / run_id / "config.json"
        if cfg_path.exists() and EpisodeConfig.model_validate_json(cfg_path.read_text()) != config:
            raise Conflict(f"run id '{run_id}' already exists with a different config ({cfg_path})", field="run_id")
        total = len(decision_dates(market, config.tickers, config.start, config.end, config.every, config.market))
        if total == 0:
            raise BadInput(f"no decision point in {inp.start}..{inp.end}", field="start")
        return config, run_id, total, data

    def _data(self, inp: BacktestInput, run_id: str):
        """The files given, else those the run read before it stopped; a resumed run refuses other files than it
        started on (by path: a file appended to since is read as it is now)."""
        from agent.data.sources import DataFiles, resolved
        from graph.backtest.loop import session_id_of
        from graph.kernel.capabilities import data_files
        from graph.manifest import session_files

        session = session_id_of(run_id)
        given = DataFiles(prices=inp.prices, news=inp.news, fundamentals=inp.fundamentals).given()
        before = session_files(self.store, session, DataFiles()).given() if given else {}
        for kind, path in given.items():
            if kind in before and resolved(path) != resolved(before[kind]):
                raise Conflict(f"run '{run_id}' was run on {kind} {before[kind]}, not {path}: resume it without "
                               f"--{kind} (or with the same file), or start a new run id", field=kind)
        return data_files(inp, self.store, session)

    def _launch(self, task_id: str, config, run_id: str, data, inp: BacktestInput) -> None:
        self._start_thread(task_id, self._run, (task_id, config, run_id, data, inp))

    def _start_thread(self, task_id: str, target, args: tuple) -> None:
        thread = threading.Thread(target=target, args=args, name=f"task-{task_id}", daemon=True)
        with _LIVE_LOCK:
            _LIVE[task_id] = thread
        thread.start()

    def _set(self, task_id: str, **fields: Any) -> Optional[dict]:
        fields["updated_at"] = fields["heartbeat_at"] = time.time()
        return self.col.find_one_and_update({"_id": task_id}, {"$set": fields}, return_document=ReturnDocument.AFTER)

    def _run(self, task_id: str, config, run_id: str, data, inp: BacktestInput) -> None:
        from graph.backtest.loop import run_backtest

        with self._lifecycle(task_id):
            doc = self._set(task_id, status="running", started_at=time.time())
            if doc and doc.get("cancel_requested"):
                raise TaskCancelled()
            progress = dict((doc or {}).get("progress") or {})
            total, trades = int(progress.get("total", 0)), int(progress.get("trades", 0))
            started, first_done = time.monotonic(), [None]

            def on_step(entry) -> None:
                nonlocal trades
                done = entry.decision_point_idx + 1
                if first_done[0] is None:
                    first_done[0] = done - 1  # a resumed run starts past zero: rate from this process's points
                rate = (time.monotonic() - started) / max(1, done - first_done[0])
                trades += len(entry.exits) + len(entry.execution_result.executed_trades)
                after = self._set(task_id, progress={"done": done, "total": total, "date": entry.date,
                                                     "equity": entry.equity, "trades": trades,
                                                     "eta_s": round(rate * (total - done), 1)})
                if after and after.get("cancel_requested"):
                    raise TaskCancelled()

            from graph.kernel.capabilities import with_spending

            runtime = with_spending(self.runtime_factory(config.memory, data), inp)  # the cache switch, the budgets
            result = run_backtest(config, self.store, progress=False, runtime=runtime,
                                  out_dir=self.experiments, run_id=run_id, on_step=on_step)
            plot = None
            if result.equity_curve:
                from graph.backtest.plot import plot_result

                plot = str(plot_result(result, self.experiments / run_id / "equity.png"))
            summary = {"decision_points": result.decision_points, "actions": result.actions,
                       "total_return": result.metrics.get("total_return"), "warnings": result.warnings,
                       "plot": plot}
            self._set(task_id, status="succeeded", finished_at=time.time(), summary=summary,
                      progress={"done": result.decision_points, "total": total, "trades": trades, "eta_s": 0.0,
                                "equity": result.equity_curve[-1].equity if result.equity_curve else None,
                                "date": result.equity_curve[-1].date if result.equity_curve else None})

    @contextlib.contextmanager
    def _lifecycle(self, task_id: str) -> Iterator[None]:
        """Around a task's body: its heartbeat; a cancel ends it `cancelled`, any other exception `failed` with the
        error (a task never dies silently); and its worker leaves _LIVE however it ends. A store that is gone or
        closed can't take the final status: the task then reads `interrupted`, its thread being gone, resumable."""
        stop_beat = threading.Event()
        threading.Thread(target=self._heartbeat, args=(task_id, stop_beat), daemon=True).start()
        try:
            yield
        except TaskCancelled:
            self._set_final(task_id, status="cancelled", finished_at=time.time())
        except BaseException as e:  # noqa: BLE001 - its document says why
            err = translate(e)
            self._set_final(task_id, status="failed", finished_at=time.time(), error=f"{err.kind}: {err.message}")
        finally:
            stop_beat.set()
            with _LIVE_LOCK:
                _LIVE.pop(task_id, None)

    def _set_final(self, task_id: str, **fields: Any) -> None:
        try:
            self._set(task_id, **fields)
        except PyMongoError:  # the store is gone (or closed): the document can't say it, the dead thread does
            pass

    def _heartbeat(self, task_id: str, stop: threading.Event) -> None:
        # a cycle can take longer than the staleness window with a networked model: beat independently
        while not stop.wait(self.heartbeat_s):
            try:
                self.col.update_one({"_id": task_id, "status": {"$in": list(ACTIVE)}},
                                    {"$set": {"heartbeat_at": time.time()}})
            except Exception:  # noqa: BLE001 - a missed beat only makes the task look stale sooner
                pass
