"""The README is a front door: short, and every guide it points to is there. The guides' own links resolve, anchors
included; no guide is left out of the README's table of contents; user documents carry no internal issue numbers
and no dated measurements outside docs/benchmarks.md; and the capability table in docs/kernel.md is the kernel's
(docs count nothing that can drift)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, where a `](…)` or a `#` heading means what it says."""
    lines, inside = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append((n, line))
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but `-` and `_` dropped, spaces as `-`, repeats numbered."""
    seen: dict[str, int] = {}
    for _, line in prose(path):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            seen[base] = seen.get(base, -1) + 1
            if seen[base]:
                seen[f"{base}-{seen[base]}"] = 0
    return set(seen)


def broken_links(path: Path) -> list[str]:
    broken = []
    for n, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto: — not ours to check offline
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading with that id in {dest.relative_to(ROOT)})")
    return broken


def test_the_readme_is_at_most_200_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 200, f"README.md has {n} lines: move the detail into a guide in docs/"


def test_every_link_in_the_readme_and_the_guides_resolves():
    assert GUIDES, "no guides in docs/"
    broken = [b for path in (README, *GUIDES) for b in broken_links(path)]
    assert broken == []


def test_the_link_check_catches_a_missing_guide_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Two words\n")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#two-words) [gone](nope.md) [bad](a.md#three)\n```\n[in code](ignored.md)\n```\n")
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        found = broken_links(doc)
    finally:
        ROOT = root
    assert found == ["b.md:1: nope.md (no such file)", "b.md:1: a.md#three (no heading with that id in a.md)"]


def test_the_readme_lists_every_guide():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, line in prose(README) for t in LINK.findall(line)}
    missing = [g.name for g in GUIDES if g.resolve() not in linked]
    assert missing == [], "guides missing from the README's table of contents"


ISSUE = re.compile(r"\bissues? \d+\b|(?<![\w&/])#\d+\b", re.I)
# a measurement's date: this project's measurements are dated 2026 on, its market data ends in 2025
WHEN = r"\b20(2[6-9]|[3-9]\d)-\d\d-\d\d\b"
DATED = re.compile(rf"\b(measured|bench/).{{0,120}}{WHEN}|{WHEN}.{{0,120}}\b(measured|bench/)", re.I)


def test_no_internal_issue_numbers_and_no_dated_measurements_outside_the_benchmarks():
    found = []
    for path in (README, *GUIDES):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: issue number: {line.strip()[:80]}")
            if path.name != "benchmarks.md" and DATED.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: dated measurement (belongs in docs/benchmarks.md)")
    assert found == []
    assert ISSUE.search("see issue 14") and ISSUE.search("fixed in #23") and not ISSUE.search("&#8594; a#b")
    assert DATED.search("Measured 2026-11-23 (shared machine)") and DATED.search("`bench/x.py` (2026-11-24, median")
    assert not DATED.search("measured against the fake (AAPL on 2012-06-01)")


def test_every_bench_script_is_in_the_benchmarks_guide_and_every_section_there_is_dated():
    guide = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "bench").glob("bench_*.py"))
    assert scripts and [s for s in scripts if f"bench/{s}" not in guide] == []
    sections = re.split(r"^## ", guide, flags=re.M)[1:]
    undated = [
        s.splitlines()[0]
        for s in sections
        if "no figure" not in s.splitlines()[0] and not re.search(r"\b20\d\d-\d\d-\d\d\b", s)
    ]
    assert undated == [], "a section of docs/benchmarks.md without the date it was measured"


def test_the_kernel_guide_lists_exactly_the_capabilities():
    from graph.kernel.capabilities import CAPABILITIES

    text = (ROOT / "docs" / "kernel.md").read_text(encoding="utf-8")
    table = text[text.index("| capability | input | output | HTTP |") :].split("\n\n")[0]
    rows = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert sorted(rows) == sorted(CAPABILITIES), "docs/kernel.md's capability table and CAPABILITIES differ"
    assert len(rows) == len(set(rows))
