"""The LLM response cache: a provider's answer reused for a request identical in everything that shapes it.

The key hashes what the provider is sent and who answers it: the provider, its endpoint and model, tradegraph's
choices for the model (structured-output method, temperature), every invocation parameter (sampling, max tokens,
seed, tools offered, response format) and each message whole (content, tool calls and their ids, names) less
what the provider never sees (message ids, response metadata, usage). A cached answer is never returned for a
different key.

Only a provider's model at temperature 0 (or one that takes none) is cached: a sampled answer is not "the"
answer to reuse, and the offline and replay models are tradegraph's own (free, deterministic, or the
recording itself: `replay --verify` must answer from the recording, never from here).

The store behind it is a Protocol (database/llm_cache.py implements it, graph/machine/cycle_context.py wires it): agent code
never sees the database. A read or write that fails is a miss, audited as a non-fatal `llm_cache_error`.

An entry is used only when it is the recorded answer it names (`entry_problem`): the `llm_response` event it cites
(cached_from) is in the store, intact (its content matches its hash), a provider's answer of the same session and
cycle, and says the model answered exactly what the entry holds. Anything else (an entry edited in the store, an
event it cites deleted or edited) is a miss, audited as an `llm_cache_error` with op `verify` naming why, and the
request is sent. So the cache can save requests, never steer a decision the audit log does not show.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Optional, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, message_to_dict, messages_from_dict
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig

from agent.providers import choices_of, model_name_of
from schemas.events import EventParseError, LlmResponseEvent, parse_event

# run metadata: the event_id the audit handler gives this attempt's llm_response, so a cache entry can name it
RESPONSE_ID_KEY = "tradegraph_response_event_id"
# response_metadata of a cached answer: {"event_id", "session_id", "cycle_id"} of the response it came from
CACHED_FROM = "tradegraph_cached_from"
# an entry's mark that its answer was used (a JSON pass's validated, never one cut off at the length limit: written
# by agent/passes.py only then); an entry without it is never served, so a failure is asked again, not replayed
ACCEPTED = "accepted"
_UNSENT = ("id", "response_metadata", "usage_metadata")


class ResponseCache(Protocol):
    def get(self, key: str) -> Optional[dict[str, Any]]: ...

    def put(self, key: str, entry: dict[str, Any]) -> None: ...

    def cited(self, event_id: str) -> Optional[dict[str, Any]]:
        """The stored event with this event_id, with `intact` (its content matches its hash), or None."""
        ...


# a LangGraph Studio server's runs carry only strings in their config: the process's cache (graph/machine/cycle_context.py
# set_default_services installs it) serves them
_process_cache: list[Optional[ResponseCache]] = [None]


def install_process_cache(cache: Optional[ResponseCache]) -> None:
    _process_cache[0] = cache


def process_cache(cycle_id: Optional[str]) -> Optional[ResponseCache]:
    """A Studio run's response cache (graph/machine/cycle_context.py puts it in the run's context): the process's, for a
    run naming its cycle."""
    return _process_cache[0] if cycle_id else None


def cacheable(model: BaseChatModel) -> bool:
    choices = choices_of(model)
    if not choices:  # offline or replay
        return False
    temperature = getattr(model, "temperature", None)
    if temperature is None:
        temperature = choices.get("temperature")
    return temperature is None or float(temperature) == 0.0


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def _sent(message: BaseMessage) -> dict:
    d = message_to_dict(message)
    return {"type": d["type"], "data": {k: v for k, v in d["data"].items() if k not in _UNSENT}}


def request_key(model: BaseChatModel, bound: Runnable, messages: list[BaseMessage]) -> str:
    kwargs = dict(bound.kwargs) if isinstance(bound, RunnableBinding) else {}
    params = model._get_invocation_params(stop=None, **kwargs)
    endpoint = next(
        (
            str(getattr(model, a))
            for a in ("openai_api_base", "anthropic_api_url", "base_url")
            if getattr(model, a, None)
        ),
        None,
    )
    payload = {
        "v": 1,
        "choices": choices_of(model),
        "type": model._llm_type,
        "model": model_name_of(model),
        "endpoint": endpoint,
        "params": params,
        "messages": [_sent(m) for m in messages],
    }
    return hashlib.sha256(json.dumps(_plain(payload), sort_keys=True).encode()).hexdigest()


def entry_of(answer: AIMessage, *, event_id: str, config: RunnableConfig, model: BaseChatModel) -> dict[str, Any]:
    meta = (config or {}).get("metadata") or {}
    return {
        "message": _plain(message_to_dict(answer)),
        "event_id": event_id,
        "model": model_name_of(model),
        "session_id": meta.get("session_id"),
        "cycle_id": meta.get("cycle_id"),
        "created_ts": time.time(),
    }


def answer_of(entry: dict[str, Any]) -> AIMessage:
    """The stored answer as the model gave it, marked as cached: no tokens spent on it now."""
    message = messages_from_dict([entry["message"]])[0]
    if not isinstance(message, AIMessage):
        raise ValueError(f"cache entry holds a {type(message).__name__}, not an answer")
    message.response_metadata = {
        **(message.response_metadata or {}),
        CACHED_FROM: {k: entry.get(k) for k in ("event_id", "session_id", "cycle_id")},
    }
    message.usage_metadata = None
    return message


class CachedAnswer(BaseChatModel):
    """Hands back one stored answer through the callback system, so the audit records the request as it was asked
    (model, messages, tools, response format) and the answer as an `llm_response` marked cached."""

    answer: Any
    model_name: str

    @property
    def _llm_type(self) -> str:
        return "tradegraph-cache"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer)])


def bound_to_cached(bound: Runnable, model: BaseChatModel, answer: AIMessage) -> Runnable:
    cached = CachedAnswer(answer=answer, model_name=model_name_of(model))
    if isinstance(bound, RunnableBinding):
        return RunnableBinding(bound=cached, kwargs=bound.kwargs, config=bound.config)
    return cached


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def recorded_answer(text: Any, tool_calls: Optional[list], invalid_tool_calls: Optional[list]) -> dict[str, Any]:
    """What an `llm_response` event says the model answered (its text and tool calls, as graph/machine/audit.py
    records them), in one canonical form: two answers are the same answer when these are equal."""
    return _canonical({"text": text, "tool_calls": tool_calls or [], "invalid_tool_calls": invalid_tool_calls or []})


def entry_problem(entry: dict[str, Any], cited: Optional[dict[str, Any]]) -> Optional[str]:
    """Why a cache entry is not the recorded answer it names (`cited`: the event read back by its event_id), or
    None when it is."""
    source = f"the llm_response it cites (event {entry.get('event_id')!r})"
    if cited is None:
        return f"{source} is not in the store (deleted, or not stored yet)"
    if not cited.get("intact"):
        return f"{source} was edited after it was written (its content does not match its hash)"
    try:
        event = parse_event({k: v for k, v in cited.items() if k != "intact"})
    except EventParseError:
        event = None
    if not isinstance(event, LlmResponseEvent) or event.payload.cached or event.payload.error:
        return f"{source} is not a provider's answer"
    if (event.session_id, event.cycle_id) != (entry.get("session_id"), entry.get("cycle_id")):
        return f"{source} belongs to {event.cycle_id}, not to the entry's {entry.get('cycle_id')}"
    message = messages_from_dict([entry["message"]])[0]
    held = recorded_answer(
        message.content, getattr(message, "tool_calls", None), getattr(message, "invalid_tool_calls", None)
    )
    r = event.payload
    recorded = recorded_answer(r.text, r.tool_calls, r.invalid_tool_calls)
    if _digest(held) != _digest(recorded):
        return (
            f"the entry's answer is not the one {source} recorded (content hash {_digest(held)[:12]}…, recorded "
            f"{_digest(recorded)[:12]}…)"
        )
    return None


def _digest(answer: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(answer, sort_keys=True).encode()).hexdigest()
