"""The LLM-spending flags of `run` and `backtest`: the response cache switch and the budgets (per cycle on `run`,
per whole run on `backtest`), sent as the capability's input fields (graph/kernel/models.py LlmSpending)."""

from __future__ import annotations

from graph.transports.cli.common import CliError

_BUDGETS = (
    ("max_tokens", int, "LLM tokens (input + output)", "TRADEGRAPH_MAX_TOKENS"),
    ("max_cost", float, "US dollars of LLM calls, at agent/prices.toml's prices", "TRADEGRAPH_MAX_COST"),
    ("max_llm_calls", int, "LLM requests, retries included", "TRADEGRAPH_MAX_LLM_CALLS"),
)


def add_spending_flags(parser, scope: str) -> None:
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="send every LLM request; never answer from the response cache (default: cached "
        "when the model runs at temperature 0; $TRADEGRAPH_LLM_CACHE=off)",
    )
    for name, kind, what, var in _BUDGETS:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=None,
            metavar="N",
            help=f"{what} allowed per {scope}; the call that would cross it is not sent and the "
            f"cycle fails, audited (default: ${var})",
        )


def spending_inputs(args) -> dict:
    out = {"no_cache": bool(getattr(args, "no_cache", False))}
    for name, _, _, _ in _BUDGETS:
        value = getattr(args, name, None)
        if value is not None:
            if not value > 0:  # NaN too
                raise CliError(f"--{name.replace('_', '-')} {value:g} must be positive")
            out[name] = value
    return out
