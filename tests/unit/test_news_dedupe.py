"""De-duplication keeps exactly what comparing every pair keeps (agent/features/dedupe.py): the bounds it skips
comparisons with are necessary conditions, so no near-duplicate is missed and none is invented. Checked here on
strings built to sit at the thresholds; on StockBench's real headlines in test_stockbench_news.py."""

from __future__ import annotations

import difflib
import random

import pytest

from agent.features.dedupe import (
    DIFFLIB_DUP,
    Deduper,
    _bigram_bound,
    full_scan,
    is_near_duplicate,
    same_story,
    story_of,
)
from agent.features.news import news_features, normalise_text

BASE = [  # real StockBench headlines (AAPL, AXP, BA, CRM, HON, 2025), normalised below
    "Giant chipmaker TSMC to spend $100B to expand chip manufacturing in US, Trump announces",
    "American Express Ups Quarterly Dividend 17%",
    "FedEx cargo plane makes emergency landing in Newark after bird strike",
    "Salesforce's Longtime Operating Chief Millham to Retire; Washington Named Successor and Financial Chief",
    "Honeywell International Inc.(NasdaqGS: HON) dropped from Russell 1000 Growth Index",
    "These 2 Tech Titans Generate Substantial Cash: MSFT & AAPL",
    "Apple: $500 Billion Problem",
    "Q1",
    "AI",
]


def fast(norms: list[str]) -> list[str]:
    d = Deduper()
    return [n for n in norms if d.offer(story_of(n))]


def _edit(rng: random.Random, text: str) -> str:
    words = text.split()
    for _ in range(rng.randint(1, 5)):
        kind = rng.randrange(5)
        if kind == 0 and text:  # a character replaced, dropped or added
            i = rng.randrange(len(text))
            text = text[:i] + rng.choice(["", rng.choice("abcdefghij0123 "), text[i] * 2]) + text[i + 1 :]
            words = text.split()
        elif kind == 1 and len(words) > 1:  # two words swapped
            i = rng.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
            text = " ".join(words)
        elif kind == 2 and len(words) > 2:  # a word dropped
            words.pop(rng.randrange(len(words)))
            text = " ".join(words)
        elif kind == 3:  # a word added
            words.insert(rng.randrange(len(words) + 1), rng.choice(["shares", "the", "q2", "us", "stock"]))
            text = " ".join(words)
        else:  # a number changed: a different week, quarter or point count
            text = "".join(str(rng.randrange(10)) if c.isdigit() else c for c in text)
            words = text.split()
    return text


def test_the_index_keeps_what_the_full_comparison_keeps_near_the_thresholds():
    rng = random.Random(20250303)
    base = [normalise_text(h) for h in BASE]
    above = below = 0
    for _ in range(40):
        pool = [rng.choice(base) for _ in range(3)]
        norms = [normalise_text(_edit(rng, p)) if rng.random() < 0.8 else p for p in pool for _ in range(8)]
        rng.shuffle(norms)
        assert fast(norms) == full_scan(norms)
        for i, a in enumerate(norms):  # the test's reach: pairs on both sides of the character threshold
            for b in norms[i + 1 :]:
                if a != b:
                    r = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
                    above += DIFFLIB_DUP <= r < 1
                    below += 0.8 <= r < DIFFLIB_DUP
    assert above > 100 and below > 100


def test_each_rule_alone_is_found():
    # equal after normalising
    assert fast(["apple beats", "apple beats"]) == ["apple beats"]
    # words only: the same words reordered (difflib's ratio is low)
    a, b = "apple and microsoft lead the dow higher today", "today the dow higher lead apple and microsoft"
    assert difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() < DIFFLIB_DUP
    assert fast([a, b]) == [a]
    # characters only: a real pair from CRM's feed whose apostrophes differ (Jaccard 0.79)
    c = normalise_text(BASE[3])
    d = normalise_text(BASE[3].replace("'", "\u2019"))
    assert c != d and 5 * len(set(c.split()) & set(d.split())) < 4 * len(set(c.split()) | set(d.split()))
    assert fast([c, d]) == [c]
    # short texts (no bigram bound) still meet each other
    assert fast(["ai", "a1", "ai"]) == full_scan(["ai", "a1", "ai"])
    assert fast(["", "", "x"]) == ["", "x"]


def test_same_story_is_the_definition():
    norms = [normalise_text(h) for h in BASE] + ["american express upgrades quarterly dividend 17"]
    for a in norms:
        for b in norms:
            assert same_story(story_of(a), story_of(b)) == is_near_duplicate(a, b, set(a.split()), set(b.split()))


def test_the_same_id_or_url_is_one_item_whatever_its_headline():
    def item(hour, headline, **ids):
        return {
            "symbol": "AAPL",
            "published_at": f"2025-03-03T{hour}:00:00Z",
            "source": "Yahoo",
            "headline": headline,
            **ids,
        }

    items = [
        item(10, "Apple: $500 Billion Problem", url="https://x/1", id="7"),
        item(11, "Apple faces a $500 billion problem, analysts say", url="https://x/1"),  # the same link
        item(12, "Apple Q1 sales beat", id="7"),  # the same feed id
        item(13, "Apple Q1 sales beat", id="8"),
    ]  # a new id, but the same story as nothing kept: kept
    nf = news_features(items, "2025-03-04")
    assert (nf.unique_count, nf.duplicates_removed) == (2, 2)
    assert [i.headline for i in nf.items] == ["Apple Q1 sales beat", "Apple: $500 Billion Problem"]


@pytest.mark.parametrize("n", [1, 6, 7])
def test_a_bundle_carries_the_newest_unique_items_and_counts_them_all(n):
    items = [
        {"symbol": "AAPL", "published_at": f"2025-03-0{1 + i % 3}T1{i}:00:00Z", "source": "wire", "headline": BASE[i]}
        for i in range(n)
    ]
    nf = news_features(items, "2025-03-04")
    assert nf.unique_count == n and len(nf.items) == min(n, 6)
    stamps = [i.published_at for i in nf.items]
    assert stamps == sorted((i["published_at"] for i in items), reverse=True)[:6]


def test_the_bounds_hold_at_their_edges():
    """A pair at difflib's 0.9 exactly, at the edge of the length band (18 and 22 characters: 20 * 18 = 9 * 40),
    whose bags of bigrams share exactly the bound (13 of 17): four single insertions, each a block boundary."""
    a, b = "abcdefghijklmnopqr", "abcd0efgh1ijkl2mnop3qr"
    assert difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() == DIFFLIB_DUP
    assert (story_of(a).bigrams & story_of(b).bigrams).bit_count() == _bigram_bound(len(a) + len(b)) == 13
    assert fast([a, b]) == [a] and fast([b, a]) == [b]
