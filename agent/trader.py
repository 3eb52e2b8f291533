"""DECIDING: the trader writes the thesis; code sets its prices, validates it, and sizes orders."""

from __future__ import annotations

import math

from langchain_core.runnables import RunnableConfig

from agent.calibration import ABSTAIN_MODEL
from agent.call_context import CallContext
from agent.config import AgentConfig
from agent.markets import get_profile
from agent.memory.recall import past_notes
from agent.passes import structured_pass
from agent.prompts import task_messages
from agent.risk import equity, evaluate, risk_input, size_position
from agent.thesis import anchor_prices, anchored_levels, validate_thesis
from schemas.analysis import SymbolPanel
from schemas.debate import DebateResult
from schemas.decision import Order, PortfolioDecision, TradeThesis
from schemas.market import MarketSnapshot
from schemas.portfolio import PortfolioSnapshot


def trader_tier(debate: DebateResult, settings: AgentConfig) -> str:
    return "deep" if debate.conviction >= settings.deep_tier_conviction else "quick"


def run_trader(
    debate: DebateResult,
    panel: SymbolPanel,
    snap: MarketSnapshot,
    model,
    settings: AgentConfig,
    config: RunnableConfig,
    call: CallContext,
) -> TradeThesis:
    t = snap.bundle.technical
    evidence = {
        "symbol": snap.symbol,
        "as_of": snap.as_of,
        "price": snap.price,
        "prev_close": snap.prev_close,
        "debate": {
            "winner": debate.winner,
            "conviction": debate.conviction,
            "manager_rationale": debate.manager_rationale,
            "falsifiers": debate.falsifiers,
        },
        "anchors": {"price": snap.price, "atr14": t.atr14, "support": t.support, "resistance": t.resistance},
        "notes": [
            {"analyst": n.analyst, "stance": n.stance, "confidence": n.confidence, "key_points": n.key_points[:2]}
            for n in panel.notes
            if n.model_used != ABSTAIN_MODEL
        ],
        "forecast": snap.bundle.forecast.model_dump() if snap.bundle.forecast else None,
    }

    def follows_debate(th: TradeThesis) -> None:
        if th.direction != debate.winner:
            raise ValueError(f"direction must follow the debate winner {debate.winner}, got {th.direction}")

    # the prices code will set anyway, in the schema: a grammar-constrained model can write no price the thesis
    # refuses (SmolLM2 wrote a target of -1.37); none when code keeps the model's (ATR missing or sub-tick)
    levels = anchored_levels(debate.winner, snap.price, t.atr14)
    price_pins = {k: {"type": "number", "const": v} for k, v in (levels or {}).items()}
    thesis = structured_pass(
        model,
        task_messages(
            "trader", evidence, notes=past_notes(call.recall, config, "trader", snap), protocol=call.protocol.number
        ),
        TradeThesis,
        max_retries=settings.max_repair_retries,
        config=config,
        call=call,
        method=settings.structured_method,
        expect_symbol=snap.symbol,
        check=follows_debate,
        pins={"direction": {"type": "string", "const": debate.winner}, **price_pins},
    )
    # code owns conviction and prices: the model's numbers here are advisory at most
    thesis = anchor_prices(thesis.model_copy(update={"conviction": debate.conviction}), snap.price, t.atr14)
    validate_thesis(thesis)
    return thesis


def orders_for(
    theses: list[TradeThesis],
    portfolio: PortfolioSnapshot,
    prices: dict[str, float],
    settings: AgentConfig,
    as_of: str | None = None,
    setups: dict[str, list[str]] | None = None,
) -> list[Order]:
    """Long-only book: LONG opens a sized position when flat; SHORT closes a held one; otherwise hold.

    Sizing stays within every limit the risk engine checks, by asking the engine itself: each buy starts
    at the risk-based size in whole lots of the market and shrinks to the most lots with which the decision
    so far still passes, or is left out when not even one lot would (the thesis stays on the record). So
    the engine never meets an order the sizer knew it must reject, and one such order cannot sink the rest."""
    lot = 1 if get_profile(settings.market).fractional else get_profile(settings.market).lot_size
    capital = equity(portfolio, prices)
    by_symbol = {t.symbol: t for t in theses}
    orders = [
        Order(symbol=t.symbol, side="SELL", quantity=portfolio.quantity(t.symbol))
        for t in theses
        if t.direction == "SHORT" and portfolio.quantity(t.symbol) > 0
    ]
    for th in sorted(
        (t for t in theses if t.direction == "LONG" and portfolio.quantity(t.symbol) == 0), key=lambda t: -t.conviction
    ):
        qty = size_position(capital, settings.risk.risk_per_trade_pct, th.entry, th.stop) // lot * lot
        # the cap in closed form first (a tight stop can size far past it), then the engine decides
        qty = min(qty, math.floor(capital * settings.risk.max_notional_pct / 100 / prices[th.symbol] / lot) * lot)
        # the largest number of lots the engine accepts (every check is monotone in the quantity)
        lo, hi = 0, int(qty // lot)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _passes(
                orders + [Order(symbol=th.symbol, side="BUY", quantity=mid * lot)],
                by_symbol,
                portfolio,
                prices,
                settings,
                as_of,
            ):
                lo = mid
            else:
                hi = mid - 1
        if lo:
            # a bracket order: the position keeps the thesis's levels and exits on them (agent/exits.py)
            orders.append(
                Order(
                    symbol=th.symbol,
                    side="BUY",
                    quantity=lo * lot,
                    stop=th.stop,
                    target=th.target,
                    horizon_sessions=th.horizon_sessions,
                    conviction=th.conviction,
                    setup=list((setups or {}).get(th.symbol, [])),
                )
            )
    return orders


def _passes(
    orders: list[Order],
    theses: dict[str, TradeThesis],
    portfolio: PortfolioSnapshot,
    prices: dict[str, float],
    settings: AgentConfig,
    as_of: str | None,
) -> bool:
    decision = PortfolioDecision(theses=[theses[o.symbol] for o in orders], orders=orders, rationale="sizing")
    return evaluate(risk_input(decision, portfolio, prices, as_of), settings.risk).passed
