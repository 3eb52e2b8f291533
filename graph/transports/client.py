"""The Python client: one method per capability, the same signatures in-process and over HTTP.

    from graph.transports.client import Client
    c = Client.local()                                  # in this process, on $MONGODB_URI / the embedded store
    c = Client.http("http://127.0.0.1:8000", token=None)  # a `tradegraph serve` elsewhere
    out = c.run_cycle(["AAPL", "MSFT"], "2012-06-01")
    c.read_events(out.session_id, kind="contract").events

Both raise the kernel's errors (BadInput, NotFound, Conflict, Forbidden, StoreUnavailable, Failed), and both
return the capability's output model. Over HTTP the errors are rebuilt from the response's {error, message}.
The methods that start something (run_cycle, approve, start_backtest, start_sweep, start_benchmark) take an
`idempotency_key`: retrying with the same key gets the first answer and starts nothing again
(graph/kernel/idempotent.py).
"""
from __future__ import annotations

import json
from typing import Any, Iterator, Optional

from pydantic import BaseModel

from graph.kernel import errors as E
from graph.kernel import models as m
from graph.kernel.capabilities import REGISTRY

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
        from graph.transports.routes import ROUTES

        route = ROUTES[name]
        args = {k: v for k, v in args.items() if v is not None}
        path = route.path.format(**{p: args.pop(p) for p in route.path_params})
        body = args if route.body else None
        params = None if route.body else args
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        r = self.http.request(route.method, path, json=body, params=params, headers=headers)
        return REGISTRY[name].output_model.model_validate(self._json(r))

    def watch(self, task_id: str, poll_s: float) -> Iterator[m.TaskView]:
        from graph.transports.routes import TASK_EVENTS

        with self.http.stream("GET", TASK_EVENTS.format(task_id=task_id), timeout=None) as r:
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
            cls = E.BY_KIND.get(data.get("error"), E.StoreUnavailable if r.status_code == 503 else E.Failed)
            raise cls(data.get("message") or f"HTTP {r.status_code}: {r.text[:200]}", field=data.get("field"))
        return data

    def close(self) -> None:
        self.http.close()


class Client:
    def __init__(self, backend):
        self._b = backend

    @classmethod
    def local(cls, store=None, *, uri: Optional[str] = None, kernel=None, **kernel_options: Any) -> "Client":
        """In this process: on `kernel`, or a Kernel over `store`, or over a store opened from `uri`."""
        from graph.kernel.core import Kernel

        if kernel is not None:
            return cls(_Local(kernel, owned=False))
        if store is not None:
            return cls(_Local(Kernel(store, **kernel_options), owned=False))
        return cls(_Local(Kernel.open(uri, **kernel_options), owned=True))

    @classmethod
    def http(cls, base_url: str, token: Optional[str] = None, *, timeout_s: float = 600.0) -> "Client":
        """Over HTTP to `tradegraph serve`; a cycle can take minutes with a networked model."""
        return cls(_Http(base_url, token, timeout_s))

    def close(self) -> None:
        self._b.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, name: str, idempotency_key: Optional[str] = None, **args: Any) -> Any:
        return self._b.call(name, args, idempotency_key)

    # ------------------------------------------------------------ capabilities (defaults = the models')
    def run_cycle(self, symbols: list[str], as_of: str, session_id: Optional[str] = None, approve: bool = False,
                  memory: Optional[str] = None, prices: Optional[str] = None, news: Optional[str] = None,
                  fundamentals: Optional[str] = None, no_cache: bool = False, max_tokens: Optional[int] = None,
                  max_cost: Optional[float] = None, max_llm_calls: Optional[int] = None,
                  idempotency_key: Optional[str] = None) -> m.CycleOutput:
        return self._call("run_cycle", idempotency_key, symbols=symbols, as_of=as_of, session_id=session_id,
                          approve=approve, memory=memory, prices=prices, news=news, fundamentals=fundamentals,
                          no_cache=no_cache, max_tokens=max_tokens, max_cost=max_cost, max_llm_calls=max_llm_calls)

    def approve(self, session_id: str, approved: bool = True, by: str = "api",
                idempotency_key: Optional[str] = None) -> m.CycleOutput:
        return self._call("approve", idempotency_key, session_id=session_id, approved=approved, by=by)

    def list_sessions(self, limit: int = 20, all: bool = False) -> m.SessionsOutput:  # noqa: A002 - the input's name
        return self._call("list_sessions", limit=limit, all=all)

    def delete_session(self, session_id: str, dry_run: bool = False, keep_memories: bool = False,
                       by: str = "api", force: bool = False) -> m.DeletionOutput:
        """Delete a session and its replays, recorded in the admin log (docs/kernel.md: off over HTTP unless the
        server sets TRADEGRAPH_ALLOW_DELETE); dry_run lists what would go."""
        return self._call("delete_session", session_id=session_id, dry_run=dry_run, keep_memories=keep_memories,
                          by=by, force=force)

    def prune_sessions(self, older_than: str, kind: Optional[str] = None, dry_run: bool = False,
                       keep_memories: bool = False, by: str = "api", force: bool = False) -> m.DeletionOutput:
        """Delete every session last written longer ago than older_than ('30d', '12h'), of one kind or any."""
        return self._call("prune_sessions", older_than=older_than, kind=kind, dry_run=dry_run,
                          keep_memories=keep_memories, by=by, force=force)

    def read_events(self, session_id: str, cycle_id: Optional[str] = None, kind: Optional[str] = None,
                    limit: int = 1000, offset: int = 0) -> m.EventsOutput:
        return self._call("read_events", session_id=session_id, cycle_id=cycle_id, kind=kind, limit=limit,
                          offset=offset)

    def portfolio(self, session_id: str) -> m.PortfolioView:
        return self._call("portfolio", session_id=session_id)

    def replay(self, session_id: str) -> m.ReplayOutput:
        return self._call("replay", session_id=session_id)

    def verify(self, session_id: str) -> m.VerifyOutput:
        return self._call("verify", session_id=session_id)

    def features(self, symbol: str, as_of: str, market: str = "us_equity", prices: Optional[str] = None,
                 news: Optional[str] = None, fundamentals: Optional[str] = None) -> m.FeatureBundle:
        return self._call("features", symbol=symbol, as_of=as_of, market=market, prices=prices, news=news,
                          fundamentals=fundamentals)

    def memory_search(self, symbol: str, query: str, as_of: str, session_id: Optional[str] = None,
                      k: int = 5) -> m.MemorySearchOutput:
        return self._call("memory_search", symbol=symbol, query=query, as_of=as_of, session_id=session_id, k=k)

    def contract_schemas(self, name: Optional[str] = None) -> m.SchemasOutput:
        return self._call("contract_schemas", name=name)

    def store_status(self) -> m.StoreStatusOutput:
        return self._call("store_status")

    def start_backtest(self, symbols: list[str], start: str, end: str, every: int = 1, capital: float = 100_000.0,
                       fees_bps: float = 1.0, slippage_bps: float = 2.0, market: str = "us_equity",
                       memory: str = "session", run_id: Optional[str] = None, prices: Optional[str] = None,
                       news: Optional[str] = None, fundamentals: Optional[str] = None,
                       no_cache: bool = False, max_tokens: Optional[int] = None, max_cost: Optional[float] = None,
                       max_llm_calls: Optional[int] = None, idempotency_key: Optional[str] = None) -> m.TaskView:
        return self._call("start_backtest", idempotency_key, symbols=symbols, start=start, end=end, every=every,
                          capital=capital, fees_bps=fees_bps, slippage_bps=slippage_bps, market=market, memory=memory,
                          run_id=run_id, prices=prices, news=news, fundamentals=fundamentals, no_cache=no_cache,
                          max_tokens=max_tokens, max_cost=max_cost, max_llm_calls=max_llm_calls)

    def start_sweep(self, universes: list[list[str]], windows: dict[str, Any], sweep_id: Optional[str] = None,
                    memory: list[str] = ["session"], models: list[dict[str, Any]] = [],  # noqa: B006 - never mutated
                    overrides: list[dict[str, Any]] = [], every: int = 5, decide_at: str = "close",  # noqa: B006
                    capital: float = 100_000.0, fees_bps: float = 1.0, slippage_bps: float = 2.0, market: str = "us_equity", workers: int = 2,
                    ray_address: Optional[str] = None, max_retries: int = 3,
                    requests_per_minute: Optional[float] = None, tokens_per_minute: Optional[float] = None,
                    prices: Optional[str] = None, news: Optional[str] = None, fundamentals: Optional[str] = None,
                    no_cache: bool = False, max_tokens: Optional[int] = None, max_cost: Optional[float] = None,
                    max_llm_calls: Optional[int] = None, idempotency_key: Optional[str] = None) -> m.TaskView:
        """A grid of backtests on Ray (graph.kernel.models.SweepInput; docs/scaling.md). The server runs it on its
        own local Ray instance: over HTTP, ray_address is refused."""
        return self._call("start_sweep", idempotency_key, universes=universes, windows=windows, sweep_id=sweep_id,
                          memory=memory, models=models, overrides=overrides, every=every, decide_at=decide_at,
                          capital=capital,
                          fees_bps=fees_bps, slippage_bps=slippage_bps, market=market, workers=workers,
                          ray_address=ray_address, max_retries=max_retries, requests_per_minute=requests_per_minute,
                          tokens_per_minute=tokens_per_minute, prices=prices, news=news, fundamentals=fundamentals,
                          no_cache=no_cache, max_tokens=max_tokens, max_cost=max_cost, max_llm_calls=max_llm_calls)

    def start_benchmark(self, benchmark_id: Optional[str] = None, models: list[dict[str, Any]] = [],  # noqa: B006
                        symbols: Optional[list[str]] = None, start: str = "2025-03-01", end: str = "2025-06-30",
                        memory: str = "session", data: Optional[str] = None, workers: int = 1,
                        no_cache: bool = False, max_tokens: Optional[int] = None, max_cost: Optional[float] = None,
                        max_llm_calls: Optional[int] = None, idempotency_key: Optional[str] = None) -> m.TaskView:
        """StockBench (graph.kernel.models.BenchmarkInput; docs/stockbench.md) as a task: the defaults are the
        paper's protocol; the scorecard is the task's artifacts once it succeeds."""
        return self._call("start_benchmark", idempotency_key, benchmark_id=benchmark_id, models=models,
                          symbols=symbols, start=start, end=end, memory=memory, data=data, workers=workers,
                          no_cache=no_cache, max_tokens=max_tokens, max_cost=max_cost, max_llm_calls=max_llm_calls)

    def estimate_benchmark(self, benchmark_id: Optional[str] = None, models: list[dict[str, Any]] = [],  # noqa: B006
                           symbols: Optional[list[str]] = None, start: str = "2025-03-01", end: str = "2025-06-30",
                           memory: str = "session", data: Optional[str] = None, workers: int = 1,
                           no_cache: bool = False, max_tokens: Optional[int] = None,
                           max_cost: Optional[float] = None, max_llm_calls: Optional[int] = None
                           ) -> m.BenchmarkEstimate:
        """What start_benchmark with the same arguments would cost, from a dry run with the offline model: no
        request is sent to any provider."""
        return self._call("estimate_benchmark", benchmark_id=benchmark_id, models=models, symbols=symbols,
                          start=start, end=end, memory=memory, data=data, workers=workers, no_cache=no_cache,
                          max_tokens=max_tokens, max_cost=max_cost, max_llm_calls=max_llm_calls)

    def audit_lookahead(self, target: str) -> m.LookaheadOutput:
        """Every piece of evidence a session's (a run's, a benchmark's) cycles saw dated after their decision time."""
        return self._call("audit_lookahead", target=target)

    def list_tasks(self, limit: int = 20) -> m.TasksOutput:
        return self._call("list_tasks", limit=limit)

    def task_status(self, task_id: str) -> m.TaskView:
        return self._call("task_status", task_id=task_id)

    def cancel_task(self, task_id: str) -> m.TaskView:
        return self._call("cancel_task", task_id=task_id)

    def resume_task(self, task_id: str) -> m.TaskView:
        return self._call("resume_task", task_id=task_id)

    def task_artifacts(self, task_id: str) -> m.ArtifactsOutput:
        return self._call("task_artifacts", task_id=task_id)

    def watch_task(self, task_id: str, poll_s: float = 0.5) -> Iterator[m.TaskView]:
        """task_status each time it changes, until it ends (over HTTP: the SSE stream)."""
        return self._b.watch(task_id, poll_s)
