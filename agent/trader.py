"""DECIDING: the trader writes the thesis; code sets its prices, validates it, and sizes orders."""
from __future__ import annotations

import math

from langchain_core.runnables import RunnableConfig

from agent.calibration import ABSTAIN_MODEL
from agent.config import AgentConfig
from agent.passes import structured_pass
from agent.prompts import task_messages
from agent.risk import equity, size_position
from agent.thesis import anchor_prices, validate_thesis
from schemas.analysis import SymbolPanel
from schemas.debate import DebateResult
from schemas.decision import Order, TradeThesis
from schemas.market import MarketSnapshot
from schemas.portfolio import PortfolioSnapshot


def trader_tier(debate: DebateResult, cfg: AgentConfig) -> str:
    return "deep" if debate.conviction >= cfg.deep_tier_conviction else "quick"


def run_trader(debate: DebateResult, panel: SymbolPanel, snap: MarketSnapshot, model, cfg: AgentConfig,
               config: RunnableConfig) -> TradeThesis:
    t = snap.bundle.technical
    evidence = {
        "symbol": snap.symbol, "as_of": snap.as_of, "price": snap.price, "prev_close": snap.prev_close,
        "debate": {"winner": debate.winner, "conviction": debate.conviction,
                   "manager_rationale": debate.manager_rationale, "falsifiers": debate.falsifiers},
        "anchors": {"price": snap.price, "atr14": t.atr14, "support": t.support, "resistance": t.resistance},
        "notes": [{"analyst": n.analyst, "stance": n.stance, "confidence": n.confidence,
                   "key_points": n.key_points[:2]} for n in panel.notes if n.model_used != ABSTAIN_MODEL],
        "forecast": snap.bundle.forecast.model_dump() if snap.bundle.forecast else None,
    }

    def follows_debate(th: TradeThesis) -> None:
        if th.direction != debate.winner:
            raise ValueError(f"direction must follow the debate winner {debate.winner}, got {th.direction}")

    thesis = structured_pass(model, task_messages("trader", evidence), TradeThesis,
                             max_retries=cfg.max_repair_retries, config=config, method=cfg.structured_method,
                             expect_symbol=snap.symbol, check=follows_debate)
    # code owns conviction and prices: the model's numbers here are advisory at most
    thesis = anchor_prices(thesis.model_copy(update={"conviction": debate.conviction}), snap.price, t.atr14)
    validate_thesis(thesis)
    return thesis


def orders_for(theses: list[TradeThesis], portfolio: PortfolioSnapshot, prices: dict[str, float],
               cfg: AgentConfig) -> list[Order]:
    """Long-only book: LONG opens a sized position when flat; SHORT closes a held one; otherwise hold."""
    capital = equity(portfolio, prices)
    orders = []
    for th in theses:
        held = portfolio.quantity(th.symbol)
        if th.direction == "LONG" and held == 0:
            qty = size_position(capital, cfg.risk.risk_per_trade_pct, th.entry, th.stop)
            # a tight stop can make the risk-based size exceed the single-position cap; the cap wins,
            # so a low-volatility name is bought smaller instead of the whole decision being refused
            qty = min(qty, math.floor(capital * cfg.risk.max_notional_pct / 100 / th.entry))
            orders.append(Order(symbol=th.symbol, side="BUY", quantity=qty))
        elif th.direction == "SHORT" and held > 0:
            orders.append(Order(symbol=th.symbol, side="SELL", quantity=held))
    return orders
