"""The audit callback: every LLM call, tool call, transition, contract, validation and error of a
cycle becomes one `state_events` document.

It is a LangChain callback handler, so nodes don't log by hand: LLM and tool calls are seen by
the callback system, and the states' own events arrive as custom events (agent/audit_events.py).
Callbacks fire from several threads when analysts run in parallel; `put` on the writer is the
only shared step and it is thread-safe.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional
from uuid import UUID

import orjson
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from agent.audit_events import AUDIT_EVENT
from agent.cache import CACHED_FROM, RESPONSE_ID_KEY
from agent.llm import ATTEMPT_KEY, AttemptPlan, describe_failure, next_wait
from agent.pricing import Spend, call_cost
from schemas.events import EventKind, new_event

# orjson refuses (TypeError) what is not JSON's own: a subclass of str, int, dict or list, a datetime, a dataclass,
# a numpy number, a non-str key, an int past 64 bits. Those take the json module's path below, as they always did
_NATIVE_ONLY = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def to_plain(value: Any) -> Any:
    """Plain BSON-safe data: LangChain and Pydantic objects are serialised, never pickled.

    Most payloads are JSON data already: one orjson round trip copies them (4x the json module's speed on a
    StockBench decision point's ~1,000 payloads). A float that is NaN or infinite becomes null there, as it does in
    the hash chain (database/events.py `event_hash`) and in every contract (Pydantic's JSON mode): JSON has no such
    number."""
    if isinstance(value, (dict, list)):
        try:
            return orjson.loads(orjson.dumps(value, option=_NATIVE_ONLY))
        except TypeError:
            pass
        try:
            return json.loads(json.dumps(value))
        except (TypeError, ValueError):
            pass
    return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        out = {"type": value.type, "content": _walk(value.content)}
        for attr in ("tool_calls", "tool_call_id", "name"):
            v = getattr(value, attr, None)
            if v:
                out[attr] = _walk(v)
        return out
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, type) and issubclass(value, BaseModel):
        return value.__name__
    if isinstance(value, dict):
        return {str(k): _walk(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        if isinstance(value, int) and abs(value) >= 2**63:
            return str(value)
        return value
    return json.loads(json.dumps(value, default=str))


def structured_output_name(params: dict) -> Optional[str]:
    rf = params.get("response_format") or params.get("ls_structured_output_format")
    if rf is None:
        return None
    if isinstance(rf, type):
        return rf.__name__
    if isinstance(rf, dict):
        if "json_schema" in rf:
            return rf["json_schema"].get("name")
        if rf.get("type") == "json_object":
            return "json_object"
        if "schema" in rf:
            return structured_output_name({"response_format": rf["schema"]}) or "schema"
    return str(rf)


def offered_tool_names(params: dict) -> list[str]:
    names = []
    for t in params.get("tools") or []:
        if isinstance(t, dict):
            names.append(t.get("function", {}).get("name") or t.get("name") or "?")
        else:
            names.append(getattr(t, "name", str(t)))
    return names


class AuditHandler(BaseCallbackHandler):
    raise_error = True  # an audit that fails must fail the cycle, not vanish
    # chain and retriever runs carry nothing the audit records; skipping them saves dispatch per runnable
    ignore_chain = True
    ignore_retriever = True

    def __init__(self, writer, session_id: str, cycle_id: str):
        self.writer = writer
        self.session_id = session_id
        self.cycle_id = cycle_id
        self._started: dict[UUID, float] = {}
        self._tool_names: dict[UUID, str] = {}
        # end callbacks carry no metadata: remember each run's state from its start
        self._states: dict[UUID, str] = {}
        self._plans: dict[UUID, Optional[AttemptPlan]] = {}
        # the event_id agent/passes.py chose for an attempt's llm_response: a cache entry names it
        self._response_ids: dict[UUID, Optional[str]] = {}
        self.cached_calls = 0  # answers from the response cache: no request sent, nothing billed
        self._asked: dict[UUID, tuple[Optional[str], list]] = {}  # the model and messages asked: price, estimate
        self.spend = Spend()  # tokens and dollars by state
        self.llm_calls = 0  # attempts, failed ones included: each is a request the provider may bill
        self.tokens = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        # the past notes each agent was given: the approval screen shows them
        self.retrievals: list[dict] = []

    # -------------------------------------------------------------- plumbing
    def _put(
        self,
        kind: EventKind,
        payload: dict,
        metadata: Optional[dict],
        run_id=None,
        parent_run_id=None,
        state: Optional[str] = None,
        event_id: Optional[str] = None,
    ) -> None:
        self.writer.put(
            new_event(
                self.session_id,
                self.cycle_id,
                state or (metadata or {}).get("langgraph_node") or "RUNNER",
                kind,
                to_plain(payload),
                run_id=str(run_id) if run_id else None,
                parent_run_id=str(parent_run_id) if parent_run_id else None,
                event_id=event_id,
            )
        )

    # -------------------------------------------------------------- LLM calls
    def on_chat_model_start(
        self,
        serialized,
        messages: list[list[BaseMessage]],
        *,
        run_id,
        parent_run_id=None,
        tags=None,
        metadata=None,
        **kwargs,
    ) -> None:
        params = kwargs.get("invocation_params") or {}
        self._started[run_id] = time.perf_counter()
        self._states[run_id] = (metadata or {}).get("langgraph_node") or "RUNNER"
        model = params.get("model_name") or params.get("model") or (metadata or {}).get("ls_model_name")
        plan = self._plans[run_id] = AttemptPlan.from_dict((metadata or {}).get(ATTEMPT_KEY))
        self._response_ids[run_id] = (metadata or {}).get(RESPONSE_ID_KEY)
        self._asked[run_id] = (model, messages[0])
        self._put(
            "llm_request",
            {
                "messages": [to_plain(m) for m in messages[0]],
                "model": model,
                "tools": offered_tool_names(params),
                "structured_output": structured_output_name(params),
                "attempt": plan.attempt if plan else 1,
            },
            metadata,
            run_id,
            parent_run_id,
        )

    def on_llm_end(self, response, *, run_id, parent_run_id=None, **kwargs) -> None:
        started = self._started.pop(run_id, None)
        self._plans.pop(run_id, None)
        gen = response.generations[0][0] if response.generations and response.generations[0] else None
        msg = getattr(gen, "message", None)
        metadata = getattr(msg, "response_metadata", {}) or {}
        cached_from = metadata.get(CACHED_FROM)
        usage, cost, priced_as = self._tally(run_id, msg, cached=cached_from is not None)
        self._put(
            "llm_response",
            {
                "text": to_plain(msg.content) if msg is not None else getattr(gen, "text", None),
                "tool_calls": to_plain(getattr(msg, "tool_calls", []) or []),
                # arguments that were not JSON: kept raw, so the audit shows what the model really sent
                "invalid_tool_calls": to_plain(getattr(msg, "invalid_tool_calls", []) or []),
                "usage": to_plain(usage),
                "cost_usd": cost,  # None: the model has no price (agent/prices.toml), never counted as $0
                "priced_as": priced_as,
                "model": metadata.get("model_name"),
                "finish_reason": metadata.get("finish_reason"),
                # the provider's SDK raises on any other status, so a provider's answer came with HTTP 200 (ChatOpenAI
                # names the provider in llm_output, the other integrations in the message's metadata)
                "http_status": 200
                if cached_from is None
                and ((response.llm_output or {}).get("model_provider") or metadata.get("model_provider"))
                else None,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3) if started else None,
                "error": None,
                # an answer from the response cache: no request was sent; cached_from is the llm_response it came from
                "cached": cached_from is not None,
                "cached_from": (cached_from or {}).get("event_id"),
            },
            kwargs.get("metadata"),
            run_id,
            parent_run_id,
            state=self._states.pop(run_id, None),
            event_id=self._response_ids.pop(run_id, None),
        )

    def on_llm_error(self, error: BaseException, *, run_id, parent_run_id=None, **kwargs) -> None:
        started = self._started.pop(run_id, None)
        plan = self._plans.pop(run_id, None)
        failure = describe_failure(error)
        partial = failure.partial  # a truncated answer: its text and the tokens it cost are on the record
        self._put(
            "llm_response",
            {
                "text": partial.content if partial is not None else None,
                "tool_calls": [],
                "invalid_tool_calls": [],
                **dict(zip(("usage", "cost_usd", "priced_as"), self._tally(run_id, partial, failed=partial is None))),
                "finish_reason": partial.response_metadata.get("finish_reason") if partial is not None else None,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3) if started else None,
                "error": f"{type(error).__name__}: {error}",
                "error_type": failure.error_type,
                "http_status": failure.http_status,
                "retryable": failure.retryable,
                "retry_after_s": failure.retry_after_s,
                # the wait the retry loop (agent/passes.py) takes before the next attempt; None: no next attempt
                "retry_in_s": next_wait(failure, plan) if plan is not None and partial is None else None,
            },
            kwargs.get("metadata"),
            run_id,
            parent_run_id,
            state=self._states.pop(run_id, None),
            event_id=self._response_ids.pop(run_id, None),
        )

    def _tally(self, run_id, message, *, cached: bool = False, failed: bool = False) -> tuple:
        """(usage, dollars, priced_as) of one attempt, added to the cycle's spend. A cached answer cost nothing now;
        a failed attempt without an answer (an error status, a timeout) is counted as unbilled."""
        model, asked = self._asked.pop(run_id, (None, []))
        cost: Optional[float]
        if cached or failed:
            usage, cost, priced_as = {k: 0 for k in self.tokens}, 0.0, None
        else:
            usage, cost, priced_as = call_cost(message, asked, model)
        for k in self.tokens:
            self.tokens[k] += int(usage.get(k, 0) or 0)
        if cached:
            self.cached_calls += 1
        else:
            self.llm_calls += 1
        self.spend.add(self._states.get(run_id) or "RUNNER", usage, cost, cached=cached)
        return to_plain(usage), cost, priced_as

    # -------------------------------------------------------------- tool calls
    def on_tool_start(
        self, serialized, input_str, *, run_id, parent_run_id=None, tags=None, metadata=None, inputs=None, **kwargs
    ) -> None:
        name = (serialized or {}).get("name") or kwargs.get("name") or "?"
        self._tool_names[run_id] = name
        self._started[run_id] = time.perf_counter()
        self._states[run_id] = (metadata or {}).get("langgraph_node") or "RUNNER"
        args = inputs if inputs is not None else input_str
        if isinstance(args, dict):
            args = {k: v for k, v in args.items() if k != "config"}
        self._put("tool_call", {"name": name, "args": args}, metadata, run_id, parent_run_id)

    def on_tool_end(self, output, *, run_id, parent_run_id=None, **kwargs) -> None:
        started = self._started.pop(run_id, None)
        result = getattr(output, "content", output)
        if isinstance(result, str):
            try:
                result = json.loads(result)
            except ValueError:
                pass
        self._put(
            "tool_result",
            {
                "name": self._tool_names.pop(run_id, "?"),
                "result": result,
                "error": None,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3) if started else None,
            },
            kwargs.get("metadata"),
            run_id,
            parent_run_id,
            state=self._states.pop(run_id, None),
        )

    def on_tool_error(self, error: BaseException, *, run_id, parent_run_id=None, **kwargs) -> None:
        self._started.pop(run_id, None)
        self._put(
            "tool_result",
            {"name": self._tool_names.pop(run_id, "?"), "result": None, "error": f"{type(error).__name__}: {error}"},
            kwargs.get("metadata"),
            run_id,
            parent_run_id,
            state=self._states.pop(run_id, None),
        )

    # -------------------------------------------------------------- the states' own events
    def on_custom_event(self, name: str, data: Any, *, run_id, tags=None, metadata=None, **kwargs) -> None:
        if name != AUDIT_EVENT:
            return
        match data:  # as agent/audit_events.py emit sends it
            case {"kind": kind, "payload": payload}:
                if kind == "retrieval":
                    self.retrievals.append(payload)
                self._put(kind, payload, metadata, run_id, kwargs.get("parent_run_id"))
