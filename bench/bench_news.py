"""News features on StockBench's real headlines: time per 20-symbol decision point, and the pin of de-duplication.

For every symbol-day of StockBench's window (83 sessions x 20 symbols, each a 30-day look-back, decided at the open
by default) it times `news_features` (CPU time: the machine is shared) and, with --pin, checks that its kept set is
the one the definition gives when applied the slow way (agent/features/dedupe.py `full_scan`, difflib on every
pair: minutes). Data: the StockBench archive shipped in agent/data/stockbench, or --news FILE (own-data JSONL).
Run: .venv/bin/python bench/bench_news.py [--pin] [--decide-at close] [--every N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.data.news import load_news
from agent.data.stockbench import load_tree
from agent.features.dedupe import Deduper, full_scan, story_of
from agent.features.news import news_features, normalise_text
from agent.markets import get_profile, trading_days

DJIA20 = "AAPL AMGN AMZN AXP BA CAT CRM GS HD HON IBM JNJ JPM MCD MSFT PG SHW TRV UNH V".split()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--news", help="own-data news JSONL (default: the shipped StockBench archive)")
    ap.add_argument("--decide-at", default="open", choices=("open", "close"))
    ap.add_argument("--pin", action="store_true", help="also compare every kept set with the full difflib scan")
    ap.add_argument("--every", type=int, default=1, help="every Nth session only")
    args = ap.parse_args()
    news = load_news(args.news) if args.news else load_tree().news
    profile = get_profile("us_equity", decide_at=args.decide_at)
    days = trading_days(profile, "2025-03-03", "2025-06-30")[:: args.every]
    windows = [(s, d, news.headlines(s, d, 30, profile)) for d in days for s in DJIA20]
    cold = sum(1 for s, d, _ in windows if d == days[0])
    t0 = time.process_time()
    spent, kept, dropped = [], 0, 0
    for _symbol, d, heads in windows:
        t = time.process_time()
        nf = news_features(heads, d, profile)
        spent.append(time.process_time() - t)
        kept, dropped = kept + nf.unique_count, dropped + nf.duplicates_removed
    total = time.process_time() - t0
    print(
        f"news_features, {len(windows)} symbol-days ({len(days)} sessions x 20, decided at the {args.decide_at}): "
        f"{total:.2f} s CPU; first session (cold) {sum(spent[:cold]) * 1e3:.0f} ms, later sessions "
        f"{sum(spent[cold:]) / max(1, len(days) - 1) * 1e3:.1f} ms per 20-symbol decision point; "
        f"{kept:,} items kept, {dropped:,} dropped as repeats"
    )
    if args.pin:
        t0, differ = time.process_time(), []
        for s, d, heads in windows:
            norms = [
                normalise_text(h["headline"]) for h in sorted(heads, key=lambda h: (h["published_at"], h["headline"]))
            ]
            dd = Deduper()
            if [n for n in norms if dd.offer(story_of(n))] != full_scan(norms):
                differ.append(f"{s} {d.date()}")
        print(
            f"pin against the full difflib scan: {len(windows) - len(differ)}/{len(windows)} symbol-days identical "
            f"({time.process_time() - t0:.0f} s CPU for the full scan){'; differ: ' + ', '.join(differ) if differ else ''}"
        )
    print(f"RESULT news_ms_per_decision_point={sum(spent[cold:]) / max(1, len(days) - 1) * 1e3:.1f}")


if __name__ == "__main__":
    main()
