"""The two kinds of LLM call a state may make, kept apart by construction.

`tool_pass` binds only the state's allow-listed tools, runs a bounded loop, executes each
tool and feeds the result back. `structured_pass` binds no tools, asks for the state's
contract as JSON, validates it, and on failure sends a repair prompt carrying the validation
error, a bounded number of times, before failing closed with ContractError.

Both call the model through `call_model`, the one place a model is called: it answers from the response cache
when it can (agent/cache.py), checks the budgets before each attempt and retries 429, 5xx and timeouts itself
(agent/llm.py), each attempt its own audited request.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

from agent import cache as response_cache
from agent.audit_events import emit
from agent.budget import BudgetExceeded, output_cap, request_tokens
from agent.call_context import OUTSIDE_A_CYCLE, CallContext
from agent.call_schema import UNSAFE, CallFacts, TextRule, call_schema, figure_texts
from agent.endpoint_slots import endpoint_slot
from agent.guards import GuardError, Shown, check_figures, check_symbol
from agent.json_chat_model import JsonChatModel, answer_text, lean_schema, parse_answer, pruned_schema, response_format
from agent.llm import ATTEMPT_KEY, AttemptPlan, LLMCallFailed, call_failed, describe_failure, next_wait, retry_policy_of
from agent.output_caps import cap_of
from agent.pricing import call_cost, price_of
from agent.prompts import repair_message
from agent.protocols import CURRENT, PASS_PROTOCOL, PASS_PROTOCOLS, PassProtocol, version  # noqa: F401 - re-exported
from agent.providers import capped, choices_of, model_name_of
from agent.tools import with_context

T = TypeVar("T", bound=BaseModel)


class ContractError(RuntimeError):
    """A model's answer still did not fit its contract after the bounded repairs."""

    def __init__(self, schema: str, error: str, attempts: int):
        super().__init__(f"{schema} did not validate after {attempts} attempt(s): {error}")
        self.schema, self.error, self.attempts = schema, error, attempts


class TickerGuardError(ContractError):
    """A contract named a symbol other than the one asked about: the state fails closed at once."""


# The pass protocols, each a named version with what it changed, are agent/protocols.py's table; the passes ask a
# version's flags. Only what the messages hold needs a version for replays: a replay matches a request by its
# messages, the tools' names and the structured output's name (the response_format schemas are versioned all the
# same, so a recording's requests say what they were sent).
# The protocol a pass runs under is its CallContext's (agent/call_context.py): the run's, a replay's the recorded one.


def tool_pass(
    model: BaseChatModel,
    messages: list[BaseMessage],
    tools: dict[str, BaseTool],
    allowed: frozenset[str],
    *,
    state: str,
    max_steps: int,
    config: RunnableConfig,
    call: CallContext = OUTSIDE_A_CYCLE,
    structured_follows: bool = True,
) -> list[BaseMessage]:
    """The state's tool rounds; returns the messages with every call and result, for the structured pass.

    Under protocol 2 with a structured pass to follow, a round whose calls all ran ends the pass (the structured
    pass reads their results); a model that calls nothing ends it too. Without a structured pass to follow (the
    model's own last answer is the result), or under protocol 1, the model is asked again after each round."""
    protocol = call.protocol.number
    stop_after_results = version(protocol).ends_on_tool_results and structured_follows
    offered = [tools[name] for name in sorted(allowed) if name in tools]
    # never a tool_choice: every API's default with tools offered is "auto", and some OpenAI-compatible
    # servers (LM Studio) reject the parameter outright
    bound = _bound(model, ("tools",) + tuple((t.name, id(t)) for t in offered), lambda: model.bind_tools(offered))
    messages = list(messages)
    for _ in range(max_steps):
        ai = call_model(model, bound, messages, config, call=call)
        messages.append(ai)
        if not ai.tool_calls and not ai.invalid_tool_calls:
            return messages
        results = [_run_tool(asked, tools, allowed, state, config, call) for asked in ai.tool_calls]
        results += [_invalid_tool_call(call, ai, state, config) for call in ai.invalid_tool_calls]
        messages += results
        if stop_after_results and all(r.status != "error" for r in results):
            return messages
    emit("error", {"type": "tool_steps_exhausted", "state": state, "max_steps": max_steps}, config)
    return messages


def _run_tool(
    call: Mapping[str, Any],
    tools: dict[str, BaseTool],
    allowed: frozenset[str],
    state: str,
    config: RunnableConfig,
    context: CallContext = OUTSIDE_A_CYCLE,
) -> ToolMessage:
    name = call["name"]
    if name not in allowed or name not in tools:
        reason = f"tool {name!r} is not allowed in state {state} (allowed: {', '.join(sorted(allowed)) or 'none'})"
        emit(
            "error",
            {
                "type": "tool_refused",
                "tool": name,
                "args": call.get("args", {}),
                "state": state,
                "allowed": sorted(allowed),
                "reason": reason,
            },
            config,
        )
        return ToolMessage(content=f"REFUSED: {reason}", tool_call_id=call["id"], name=name, status="error")
    try:
        result = tools[name].invoke(with_context(call.get("args", {}), context.tools), config)
    except Exception as e:  # noqa: BLE001 - the tool's own error goes back to the model; the callback audited it
        return ToolMessage(
            content=f"ERROR: {type(e).__name__}: {e}", tool_call_id=call["id"], name=name, status="error"
        )
    return ToolMessage(
        content=to_json_text(result, compact=context.protocol.compact_json), tool_call_id=call["id"], name=name
    )


def _invalid_tool_call(call: Mapping[str, Any], ai: AIMessage, state: str, config: RunnableConfig) -> ToolMessage:
    """Arguments that are not JSON (often an answer cut off at the length limit): nothing runs, the
    model is told why, and it may call again within the step bound."""
    finish = finish_reason(ai)
    reason = f"the arguments of your call to {call.get('name')!r} are not valid JSON ({call.get('error')})" + (
        "; your answer was cut off at the length limit" if finish == "length" else ""
    )
    emit(
        "error",
        {
            "type": "invalid_tool_call",
            "tool": call.get("name"),
            "args": call.get("args"),
            "state": state,
            "finish_reason": finish,
            "reason": reason,
        },
        config,
    )
    return ToolMessage(
        content=f"ERROR: {reason}. Call the tool again with a JSON object of arguments.",
        tool_call_id=call.get("id") or "",
        name=call.get("name"),
        status="error",
    )


def call_model(
    model: BaseChatModel,
    bound: Runnable,
    messages: list[BaseMessage],
    config: RunnableConfig,
    keep_when_valid: Optional[list[Callable[[], None]]] = None,
    *,
    call: CallContext = OUTSIDE_A_CYCLE,
) -> AIMessage:
    """One model answer. The budget is checked before each attempt, so a retry is never sent past it.

    The cache keeps only answers that were used: one cut off at the length limit never, one of a JSON pass
    (`keep_when_valid` given) only once its contract validated (the pass calls the write it is handed), so a
    failure is asked again on the next run rather than replayed from the cache.

    A 429, 5xx or timeout is retried (at most the policy's retries, waiting its backoff or the provider's
    Retry-After); anything else from the provider fails closed at once. Each attempt is its own `invoke`,
    so the audit handler records each one's request and response (or error, status and wait).
    """
    state = (config.get("metadata") or {}).get("langgraph_node")
    cap = cap_of(choices_of(model).get("output_caps"), state)
    window = choices_of(model).get("context_window")
    if window:  # the endpoint's checked window (agent/model_profiles.py): a prompt that can't fit is never sent
        cap = _fit_window(model, bound, messages, config, state, cap, window)
    if cap:  # a provider model's every request carries its state's output cap (agent/output_caps.py)
        bound = capped(bound, model, cap)
    cache = call.cache if response_cache.cacheable(model) else None
    key = _cache_key(model, bound, messages, config) if cache is not None else None
    if key is not None:
        hit = _cache_read(cache, key, config)
        if hit is not None:
            # no request is sent, so no budget is spent; the audit still shows what was asked and where the answer
            # came from
            return response_cache.bound_to_cached(bound, model, hit).invoke(messages, config)
    policy = retry_policy_of(model)
    budget = call.budget
    attempt = 0
    while True:
        attempt += 1
        try:
            held = _reserve(budget, model, bound, messages) if budget else None
        except BudgetExceeded as e:
            _refused(e, config)
            raise
        plan = AttemptPlan.of(policy, attempt)
        response_id = uuid.uuid4().hex
        try:
            with endpoint_slot(choices_of(model)):  # a capped endpoint's queue is waited in here, not timed out in
                ai = _invoke(bound, messages, _with_attempt(config, plan, response_id))
        except Exception as e:
            failure = describe_failure(e)
            if failure.partial is None:
                if held is not None and budget is not None:
                    budget.settle(held, 0, 0.0)  # no answer, nothing billed; the request still counts as a call
                if not failure.provider:
                    raise  # tradegraph's own error (a replay mismatch, a bug): not the provider's to retry
                wait = next_wait(failure, plan)
                if wait is None:
                    raise call_failed(failure, plan, model) from e
                time.sleep(wait)
                continue
            ai = failure.partial  # a truncated answer the SDK raised on: paid for; the caller repairs it
            key = None  # not stored: the SDK raised on it, so a rerun asks again
        if held is not None and budget is not None:
            usage, cost, _ = call_cost(ai, messages, model_name_of(model))
            problem = budget.settle_answer(held, usage, cost)
            if problem is not None:  # not believed: counted as the call's cap; the answer itself stands
                emit(
                    "validation",
                    {
                        "check": "usage",
                        "ok": False,
                        "error": problem,
                        "model": model_name_of(model),
                        "reported": {k: usage.get(k) for k in ("input_tokens", "output_tokens", "total_tokens")},
                        "counted_tokens": held.tokens,
                        "counted_cost_usd": round(held.cost, 8),
                    },
                    config,
                )
        if key is not None and finish_reason(ai) != "length" and not ai.invalid_tool_calls:
            if keep_when_valid is None:
                _cache_write(cache, key, ai, response_id, model, config)
            else:
                keep_when_valid.append(functools.partial(_cache_write, cache, key, ai, response_id, model, config))
        return ai


class ContextWindowExceeded(LLMCallFailed):
    """A prompt the model's context window can't hold: refused before it is sent."""


MIN_ANSWER_TOKENS = 64  # below this, what room the window leaves can hold no contract


def _fit_window(model, bound, messages, config, state: Optional[str], cap: Optional[int], window: int) -> int:
    """The output cap, lowered to what the window leaves after the prompt (estimated as the budgets estimate it);
    ContextWindowExceeded, audited, when the prompt leaves less than MIN_ANSWER_TOKENS."""
    kwargs = dict(bound.kwargs) if isinstance(bound, RunnableBinding) else {}
    # a window is known only for a server `models check` profiled (llama.cpp, Ollama, vLLM, LM Studio), and each
    # compiles a response format's schema into a grammar that constrains decoding, never into prompt text: the
    # window holds the messages and tools (a per-call schema naming the evidence's figures is a prompt's size)
    kwargs.pop("response_format", None)
    prompt = request_tokens(messages, kwargs)
    room = window - prompt
    if room < MIN_ANSWER_TOKENS:
        message = (
            f"{state or 'RUNNER'}: a prompt of ~{prompt} tokens does not fit {model_name_of(model)}'s context "
            f"window of {window} tokens (with at least {MIN_ANSWER_TOKENS} to answer in); not sent"
        )
        emit(
            "error",
            {
                "type": "context_window_exceeded",
                "state": state,
                "prompt_tokens": prompt,
                "context_window": window,
                "message": message,
            },
            config,
        )
        raise ContextWindowExceeded(message)
    return min(cap, room) if cap else room


def _invoke(bound: Runnable, messages: list[BaseMessage], config: RunnableConfig) -> AIMessage:
    """`bound.invoke`, less a config merge: a binding that carries only arguments (bind_tools, bind_json) calls its
    model with them and the config as given, which is all RunnableBinding.invoke does once its own empty config is
    merged in (the model's invoke copies the config and its callbacks itself)."""
    if (
        isinstance(bound, RunnableBinding)
        and type(bound).invoke is RunnableBinding.invoke
        and not bound.config
        and not bound.config_factories
    ):
        return bound.bound.invoke(messages, config, **bound.kwargs)
    return bound.invoke(messages, config)


def _reserve(budget, model, bound, messages):
    """The attempt's worst case held against the budgets (agent/budget.py), or BudgetExceeded: nothing is sent."""
    kwargs = dict(bound.kwargs) if isinstance(bound, RunnableBinding) else {}
    name = model_name_of(model) or type(model).__name__
    return budget.reserve(request_tokens(messages, kwargs), output_cap(model, kwargs), price_of(name)[1], name)


def _refused(e: BudgetExceeded, config: RunnableConfig) -> None:
    """The budget, its limit and what was used, as fields (the state's own error event carries the message)."""
    emit(
        "error",
        {
            "type": "budget_exceeded",
            "budget": e.budget,
            "scope": e.scope,
            "limit": e.limit,
            "used": e.used,
            "reserved": e.reserved,
            "needed": None if e.needed != e.needed else e.needed,
            "message": str(e),
        },
        config,
    )


def _with_attempt(config: RunnableConfig, plan: AttemptPlan, response_id: str) -> RunnableConfig:
    return {
        **config,
        "metadata": {
            **(config.get("metadata") or {}),
            ATTEMPT_KEY: plan.as_dict(),
            response_cache.RESPONSE_ID_KEY: response_id,
        },
    }


def _cache_key(model, bound, messages, config) -> Optional[str]:
    try:
        return response_cache.request_key(model, bound, messages)
    except Exception as e:  # noqa: BLE001 - a request the key can't be made of is simply not cached
        _cache_error("key", e, config)
        return None


def _cache_read(cache, key: str, config: RunnableConfig) -> Optional[AIMessage]:
    try:
        entry = cache.get(key)
        # an entry from before answers were kept only once used (no `accepted` mark) may hold a failure: a miss
        if entry is None or entry.get(response_cache.ACCEPTED) is not True:
            return None
        answer = response_cache.answer_of(entry)
        cited = getattr(cache, "cited", None)
        problem = (
            response_cache.entry_problem(entry, cited(str(entry.get("event_id"))))
            if cited is not None
            else "this cache cannot read back the event its entries cite"
        )
    except Exception as e:  # noqa: BLE001 - a cache that fails is a miss, never a failed cycle
        _cache_error("read", e, config)
        return None
    if problem is not None:  # not the recorded answer it names: never used, and said so
        emit(
            "error",
            {
                "type": "llm_cache_error",
                "fatal": False,
                "op": "verify",
                "key": key,
                "cached_from": entry.get("event_id"),
                "message": problem[:500],
            },
            config,
        )
        return None
    return answer


def _cache_write(cache, key: str, ai: AIMessage, response_id: str, model, config: RunnableConfig) -> None:
    try:
        cache.put(
            key,
            {
                **response_cache.entry_of(ai, event_id=response_id, config=config, model=model),
                response_cache.ACCEPTED: True,
            },
        )
    except Exception as e:  # noqa: BLE001
        _cache_error("write", e, config)


def _cache_error(op: str, error: Exception, config: RunnableConfig) -> None:
    emit(
        "error",
        {"type": "llm_cache_error", "fatal": False, "op": op, "message": f"{type(error).__name__}: {error}"[:500]},
        config,
    )


def to_json_text(value: Any, *, compact: bool = True) -> str:
    """A tool result as the model reads it. Protocol 1 wrote json.dumps' default separators (", ", ": "): kept for
    its replays, since a tool message's text is part of what a recorded request is matched by."""
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if compact:
        return json.dumps(value, default=str, sort_keys=True, separators=(",", ":"))
    return json.dumps(value, default=str, sort_keys=True)


def structured_pass(
    model: BaseChatModel,
    messages: list[BaseMessage],
    schema: type[T],
    *,
    max_retries: int,
    config: RunnableConfig,
    call: CallContext = OUTSIDE_A_CYCLE,
    method: str = "auto",
    check: Optional[Callable[[T], None]] = None,
    expect_symbol: Optional[str] = None,
    cite_evidence: bool = False,
    pins: Optional[Mapping[str, dict]] = None,
) -> T:
    """`expect_symbol`: the contract is about this symbol: another one in its `symbol` field fails the state at once
    (TickerGuardError); another one named in its text outside a quotation is repaired (agent/guards.py).
    `cite_evidence`: every figure its text states must be one of the evidence's (analysts and the quant, whose
    evidence is the bundle). `pins`: what `check` holds some fields to, as their schemas (the analyst's role as a
    `const`, ...). All of these are also put in the schema the call is sent (agent/call_schema.py), where the
    method sends one the server may constrain its answer with."""
    method = structured_method(model, method)
    protocol = call.protocol.number
    shown = Shown(messages) if expect_symbol is not None else None  # what the model may quote and cite
    facts = call_facts(expect_symbol, call.universe, shown, cite_evidence, pins)
    bound = bind_json(model, schema, method, protocol, facts)
    parse = parse_answer(schema)
    messages = list(messages) + [
        json_instruction(schema, method, lean=version(protocol).compact_json, protocol=protocol)
    ]
    error = ""
    for attempt in range(1, max_retries + 2):
        guard: dict = {}
        keep: list[Callable[[], None]] = []  # the cache write of this answer, made only if it validates
        out = parse(call_model(model, bound, messages, config, keep, call=call))
        parsed, parsing_error = out["parsed"], out["parsing_error"]
        error = _short_error(parsing_error) if parsing_error is not None else ""
        if error and finish_reason(out["raw"]) == "length":
            error = f"the answer was cut off at the length limit (finish_reason=length): reply more briefly. {error}"
        if parsed is not None and not error:
            symbol = getattr(parsed, "symbol", None)
            if expect_symbol is not None and symbol != expect_symbol:
                message = f"{schema.__name__} names symbol {symbol!r}, but {expect_symbol!r} was asked about"
                emit(
                    "validation",
                    {
                        "schema": schema.__name__,
                        "attempt": attempt,
                        "ok": False,
                        "check": "ticker_guard",
                        "error": message,
                    },
                    config,
                )
                raise TickerGuardError(schema.__name__, message, attempt)
            try:
                if shown is not None and expect_symbol is not None:
                    check_symbol(parsed, expect_symbol, call.universe, shown)
                    if cite_evidence:
                        check_figures(parsed, shown)
                if check:
                    check(parsed)
            except ValueError as e:
                error = str(e)
                guard = {"check": e.check, "symbol": expect_symbol} if isinstance(e, GuardError) else {}
        if not error:
            emit("validation", {"schema": schema.__name__, "attempt": attempt, "ok": True}, config)
            for write in keep:
                write()
            return parsed
        emit(
            "validation", {"schema": schema.__name__, "attempt": attempt, "ok": False, "error": error, **guard}, config
        )
        messages += [_as_answer(out["raw"]), repair_message(schema.__name__, error)]
    raise ContractError(schema.__name__, error, max_retries + 1)


def call_facts(
    symbol: Optional[str],
    universe: Sequence[str],
    shown: Optional[Shown],
    cite_evidence: bool,
    pins: Optional[Mapping[str, dict]],
) -> CallFacts:
    """What structured_pass checks this call's answer against, as CallFacts for its schema."""
    pinned = {**({"symbol": {"type": "string", "const": symbol}} if symbol is not None else {}), **(pins or {})}
    text = None
    if symbol is not None:
        figures = figure_texts(shown.numbers_in_order) if cite_evidence and shown is not None else None
        text = TextRule(symbol, others=bool(set(universe) - {symbol}), figures=figures)
    return CallFacts(pins=pinned, text=text)


def structured_method(model: BaseChatModel, configured: str) -> str:
    """A provider model carries the method chosen for it (its provider's, or TRADEGRAPH_STRUCTURED_METHOD);
    tradegraph's own models (offline, replay) take the configured one, `auto` being json_schema."""
    return choices_of(model).get("structured_method") or (configured if configured != "auto" else "json_schema")


# the fields of a contract that code sets after the model answers (the model is not asked for them from protocol 4)
MODEL_SETS: dict[str, tuple[str, ...]] = {
    "AnalystNote": ("model_used", "self_critiqued"),  # agent/analysts.py
    "TradeThesis": ("price_source", "atr14"),  # agent/thesis.py anchor_prices
    "AgentMemory": ("decisions", "reviews"),  # graph/machine/nodes/memorizing.py grounding
}
_UNSENT_KEYWORDS = frozenset({"maxLength", "minLength", "pattern"})


def _asked_schema(node: Any) -> Any:
    """A lean schema less string lengths and patterns (no data keyword's value is touched)."""
    return pruned_schema(node, lambda key, value: key in _UNSENT_KEYWORDS and not isinstance(value, dict))


@functools.lru_cache(maxsize=128)
def asked_schema(schema: type[BaseModel], constraints: bool = False) -> dict:
    """The JSON schema a model is sent from pass protocol 4: the contract's lean schema without the fields code sets
    (never a required one); under protocol 4 without string lengths and patterns either, from protocol 5
    (`constraints`) with every constraint the contract checks. What validates is the contract itself."""
    full = lean_schema(schema.model_json_schema())
    dropped = MODEL_SETS.get(schema.__name__, ())
    if set(dropped) & set(full.get("required", ())):
        raise ValueError(f"{schema.__name__}: a required field cannot be left for code to set")
    full["properties"] = {k: v for k, v in full["properties"].items() if k not in dropped}
    if "$defs" in full and "$ref" not in json.dumps(full["properties"]):
        del full["$defs"]  # only the dropped fields used them
    return full if constraints else _asked_schema(full)


@functools.lru_cache(maxsize=128)
def _asked_response_format(schema: type[BaseModel], constraints: bool = False) -> dict:
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": asked_schema(schema, constraints), "strict": False},
    }


# llama.cpp compiles a json_object schema into a grammar that spells every repetition out: a Plan's maxItems 100 and
# 2000-character strings exceed its parser's limit ("number of rules … exceeds sane defaults"), and
# llama-cpp-python 0.3.36's server then died on the request (measured). So this method's schema is bounded tighter
# than the contract: strings and lists at most GRAMMAR_CHARS and GRAMMAR_ITEMS. Tighter, never looser: an answer
# it admits still passes the contract, and no constraint the contract checks is hidden
GRAMMAR_CHARS, GRAMMAR_ITEMS = 300, 8


def grammar_pattern(pattern: Any) -> Any:
    """A pattern as llama-cpp-python's converter can pass on. It copies an escape outside a class (`\\d`, `\\.`)
    into a grammar literal as is, which llama.cpp's parser refuses ("failed to parse grammar": the server process
    died on that request, measured on AgentMemory.as_of's date). The same strings: `\\d` as 0-9, an escaped
    punctuation character as a class of itself."""
    if not isinstance(pattern, str):
        return pattern
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif in_class or nxt.isalnum() or nxt in "]^\\":
                out.append(c + nxt)  # a class keeps its escapes (llama.cpp reads them); \\x.. and the like too
            else:
                out.append(f"[{nxt}]")
            i += 2
            continue
        in_class = (c == "[") or (in_class and c != "]")
        out.append(c)
        i += 1
    return "".join(out)


def grammar_bounded(node: Any) -> Any:
    if isinstance(node, list):
        return [grammar_bounded(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: (v if k in ("enum", "const", "default") else grammar_pattern(v) if k == "pattern" else grammar_bounded(v))
        for k, v in node.items()
    }
    if out.get("type") == "string" and not ({"enum", "const", "format"} & set(out)):
        out["maxLength"] = min(int(out.get("maxLength", GRAMMAR_CHARS)), GRAMMAR_CHARS)
        if "pattern" not in out:  # llama.cpp's own string rule admits a raw newline, which is invalid JSON (measured)
            out["pattern"] = f"^[^{UNSAFE}]{{{int(out.get('minLength', 0))},{out['maxLength']}}}$"
    if out.get("type") == "array":
        out["maxItems"] = min(int(out.get("maxItems", GRAMMAR_ITEMS)), GRAMMAR_ITEMS)
    if out.get("type") in ("number", "integer") and not ({"enum", "const"} & set(out)):
        values = bounded_values(out)
        if values is not None:
            out["enum"] = values
    return out


GRAMMAR_VALUES = 301  # the most values a bounded number is spelled out as


def bounded_values(node: dict) -> Optional[list]:
    """A bounded number as the values a grammar can spell: llama.cpp's converter ignores minimum and maximum
    (SmolLM2 wrote a stance of 1.9, measured), so a number bounded on both sides is sent as its values, 0.01 apart
    (an integer's every value), when they are few; within the bounds, never outside them."""
    lo = node.get("minimum", node.get("exclusiveMinimum"))
    hi = node.get("maximum", node.get("exclusiveMaximum"))
    if lo is None or hi is None:
        return None
    step = 1 if node["type"] == "integer" else 0.01
    first, last = round(lo / step), round(hi / step)
    if last - first + 1 > GRAMMAR_VALUES:
        return None
    values = [i if step == 1 else round(i * step, 2) for i in range(first, last + 1)]
    return [
        v
        for v in values
        if (v > lo if "exclusiveMinimum" in node and "minimum" not in node else v >= lo)
        and (v < hi if "exclusiveMaximum" in node and "maximum" not in node else v <= hi)
    ]


def bind_json(
    model: BaseChatModel,
    schema: type[BaseModel],
    method: str,
    protocol: int = PASS_PROTOCOL,
    facts: Optional[CallFacts] = None,
) -> Runnable:
    """The model asked for the contract as JSON, never with the state's tools. json_schema and json_mode go as
    an OpenAI-style `response_format`, which every provider's LangChain class maps to its own parameter
    (Anthropic's output_config, Ollama's format, Gemini's response schema). function_calling offers the
    contract as the one tool, forced by tool_choice only where the server accepts it.

    `facts` (the call's, from protocol 5): the per-call schema (agent/call_schema.py) is sent to a server that
    compiles the schema into a grammar (compiles_schema): json_object_schema, or json_schema to an endpoint
    `models check` profiled (llama.cpp, vLLM, Ollama, LM Studio). A cloud API is sent the contract's: each takes a
    subset of JSON Schema of its own (Anthropic refuses a `const` list), and the validator guards it as before.
    json_mode states the contract's schema in the prompt and function_calling names it as the tool, as before:
    a replay matches a request by its messages and tools, so they stay what every recording asked.
    tradegraph's own models (offline, replay) read a schema's name and fields only: they get the contract's."""
    shown = version(protocol).shows_constraints
    per_call = facts if facts is not None and shown and compiles_schema(model, method) else None
    if method == "function_calling":

        def make() -> Runnable:
            tool = convert_to_openai_tool(schema)  # LangChain leaves out the titles already
            forced = schema.__name__ if choices_of(model).get("tool_choice", True) else None
            return model.bind_tools(
                [tool], tool_choice=forced, ls_structured_output_format={"kwargs": {"method": method}, "schema": tool}
            )

        return _bound(model, ("json", schema, method), make)
    if method == "json_object_schema":  # llama.cpp's server: JSON constrained by the schema beside json_object
        asked = asked_schema(schema, shown)
        sent = grammar_bounded(call_schema(asked, per_call) if per_call is not None else asked)
        return _bound(
            model,
            ("json", schema, method, shown, per_call.key() if per_call else None),
            lambda: model.bind(response_format={"type": "json_object", "schema": sent}),
        )
    lean = version(protocol).lean_prompts and method == "json_schema"
    rf = _asked_response_format(schema, shown) if lean else response_format(schema, method)
    if lean and per_call is not None:
        rf = {**rf, "json_schema": {**rf["json_schema"], "schema": call_schema(rf["json_schema"]["schema"], per_call)}}
    # plain JSON Schema, parsed here: `with_structured_output` would hand ChatOpenAI's SDK the schema class,
    # which raises on an invalid answer before the repair prompt can quote the raw answer and its error.
    # ls_structured_output_format is LangSmith's record of it, which LangChain converts again on every call: a
    # provider's model gets it; tradegraph's own (offline, replay) read response_format alone, as the audit does
    if isinstance(model, JsonChatModel):
        return _bound(model, ("json", schema, method, lean, shown), lambda: model.bind(response_format=rf))
    key = ("json", schema, method, lean, shown, per_call.key() if lean and per_call is not None else None)
    return _bound(
        model,
        key,
        lambda: model.bind(
            response_format=rf, ls_structured_output_format={"kwargs": {"method": method}, "schema": rf}
        ),
    )


def compiles_schema(model: BaseChatModel, method: str) -> bool:
    """Whether the request's schema becomes a grammar on the server: llama.cpp's json_object with a schema, or a
    json_schema to an endpoint `models check` profiled (its window or method came from the profile)."""
    if isinstance(model, JsonChatModel):
        return False  # tradegraph's own models (offline, replay) read a schema's name and fields only
    choices = choices_of(model)
    return method == "json_object_schema" or (
        method == "json_schema" and bool(choices.get("context_window") or choices.get("method_from_profile"))
    )


# A pass's binding (the model with its tools or its response format) is the same for every pass of the same model and
# schema or tools: built once. RunnableBinding is immutable (bind returns a new one), so sharing it is safe
_BINDINGS: dict[tuple, tuple[BaseChatModel, Runnable]] = {}
_BINDINGS_MAX = 512


def _bound(model: BaseChatModel, key: tuple, make: Callable[[], Runnable]) -> Runnable:
    full = (id(model),) + key
    held = _BINDINGS.get(full)
    if held is not None and held[0] is model:
        return held[1]
    bound = make()
    if len(_BINDINGS) >= _BINDINGS_MAX:
        _BINDINGS.clear()
    _BINDINGS[full] = (model, bound)
    return bound


def _as_answer(raw: Any) -> AIMessage:
    """A failed answer as the assistant turn the repair prompt follows. A tool call becomes its arguments as
    text: a provider refuses a tool call left without a tool result, and the conversation then reads the same
    whatever the method (so a replay matches it)."""
    if not isinstance(raw, AIMessage):
        return AIMessage(content=str(raw))
    if raw.tool_calls or raw.invalid_tool_calls or not isinstance(raw.content, str):
        return AIMessage(content=answer_text(raw))
    return raw


def finish_reason(message: Any) -> Optional[str]:
    """Why the answer ended, in OpenAI's words: each provider's "cut off at the token limit" is "length"."""
    meta = getattr(message, "response_metadata", None) or {}
    reason = meta.get("finish_reason") or meta.get("stop_reason") or meta.get("done_reason")
    if str(reason).lower() in ("length", "max_tokens"):
        return "length"
    return reason


def json_instruction(
    schema: type[BaseModel], method: str, *, lean: bool = True, protocol: Optional[int] = None
) -> HumanMessage:
    text = f"Reply with only a JSON object for the {schema.__name__} schema."
    if method == "json_mode":  # no schema travels with json_object requests: state it (protocol 1: with titles,
        full = schema.model_json_schema()  # 2 and 3 without, 4 without the fields code sets either)
        stated = (
            asked_schema(schema, version(protocol).shows_constraints)
            if protocol is not None and version(protocol).lean_prompts
            else lean_schema(full)
            if lean
            else full
        )
        text += " Schema: " + json.dumps(stated, separators=(",", ":"))
    return HumanMessage(content=text)


def _short_error(err: Any) -> str:
    text = str(err)
    return text if len(text) <= 1500 else text[:1500] + "…"
