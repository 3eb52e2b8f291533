"""`make docs`: the example outputs of README.md and the guides in docs/, regenerated from the offline model.

    .venv/bin/python scripts/make_docs.py            # rewrite every generated block whose output changed
    .venv/bin/python scripts/make_docs.py --check    # exit 1 with a unified diff when a file is not what it would write

A generated block sits between `<!-- docs:NAME -->` and `<!-- /docs:NAME -->`: on lines of their own around a
block (a fenced output, a table), or within one line around a phrase of prose. scripts/docs_examples.py runs the
commands (the real CLI, offline, in a fresh temporary store) and says what each block holds.

What varies between two runs of the same commands is dealt with in two ways:
- relabelled, in docs_examples.py: session ids, temporary folders, the repository's path and loopback ports get
  fixed stand-ins, so the same outputs always print the same text and the blocks that show one session agree;
- masked, here: wall-clock times, durations, sizes and chain hashes are compared as `<…>`. A block that differs
  from the fresh output only there keeps the text already in the file, so nothing churns and `--check` passes.

Exit codes: 0 written or current; 1 `--check` found a difference, or a command failed (nothing is written); 2 a
marker without a generator or a generator without a marker (nothing is written).
"""

import argparse
import difflib
import re
import sys

from _tradegraph import ROOT, unusable


def doc_files() -> list[str]:
    """README.md and every guide in docs/: a block may move between them without this list changing."""
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


MARKER = re.compile(r"<!-- docs:(?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /docs:(?P=name) -->", re.S)

# what may differ between two runs of the same commands, each matched and shown as its `<…>` form
MASKS = {
    # a wall-clock time (2026-11-24 23:19, 2026-11-24 23:19:14 UTC, 2026-11-24T23:19:14Z)
    "clock": (re.compile(r"\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?( UTC|Z)?"), "<time>"),
    # a hash-chain link, which covers each event's wall-clock time
    "chain": (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    # a session's size as stored JSON, which holds its events' times and durations
    "size": (re.compile(r"\b\d+(\.\d+)? (B|KB|MB|GB)\b"), "<size>"),
    # a span's start offset and duration: [+38.1 ms, 235.5 ms]
    "span": (re.compile(r"\[\+[\d.]+ ms, [\d.]+ ms\]"), "[+<ms>, <ms>]"),
    # how often and how long an exporter retried a dead collector within its timeout: (4 requests in 1.0 s)
    "wait": (re.compile(r"\(\d+ requests? in [\d.]+ s\)"), "(<n> requests in <s>)"),
}


class DocsError(Exception):
    """A marker and the generators disagree: one line, exit 2."""


def masked(text, masks):
    for name in masks:
        pattern, shown = MASKS[name]
        text = pattern.sub(shown, text)
    return text


def body_for(old_body, block):
    """What goes between the markers: the fresh output, or the old text when it differs only in masked parts."""
    inline = "\n" not in old_body
    if inline and "\n" in block.text:
        raise DocsError(f"docs:{block.name} is inline in the file but its output has several lines")
    fresh = block.text if inline else "\n" + block.text.rstrip("\n") + "\n"
    if masked(_strip(old_body), block.masks) == masked(_strip(fresh), block.masks):
        return old_body
    return fresh


def _strip(text):
    # trailing blanks are not content (rich pads its titles; editors strip them)
    return "\n".join(line.rstrip() for line in text.split("\n"))


def rewrite(text, blocks, path, used):
    def one(m):
        block = blocks.get(m.group("name"))
        if block is None:
            raise DocsError(f"{path}: marker docs:{m.group('name')} has no generator in scripts/docs_examples.py")
        used.add(block.name)
        return f"<!-- docs:{block.name} -->{body_for(m.group('body'), block)}<!-- /docs:{block.name} -->"

    return MARKER.sub(one, text)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="make_docs.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing: exit 1 and print a unified diff when a file would change"
    )
    args = parser.parse_args(argv)
    problem = unusable()
    if problem is not None:
        return problem
    import docs_examples

    try:
        blocks = {b.name: b for b in docs_examples.generate()}
    except RuntimeError as e:  # a command failed, or an output broke a claim the prose makes: nothing is written
        print(f"make_docs: error: {e}", file=sys.stderr)
        return 1
    used: set[str] = set()
    changed, files = {}, doc_files()
    try:
        for rel in files:
            path = ROOT / rel
            old = path.read_text(encoding="utf-8")
            new = rewrite(old, blocks, rel, used)
            if new != old:
                changed[rel] = (old, new)
        unused = sorted(set(blocks) - used)
        if unused:
            raise DocsError("no marker for generated block(s) {} in README.md or docs/*.md".format(", ".join(unused)))
    except DocsError as e:
        print(f"make_docs: error: {e}", file=sys.stderr)
        return 2
    for rel, (old, new) in changed.items():
        if args.check:
            sys.stdout.writelines(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel} (make docs)")
            )
        else:
            (ROOT / rel).write_text(new, encoding="utf-8")
            print(f"make_docs: rewrote {rel}", file=sys.stderr)
    if args.check and changed:
        print("make_docs: {} differ(s) from the outputs: run `make docs`".format(", ".join(changed)), file=sys.stderr)
        return 1
    if not changed:
        print(
            "make_docs: {} current".format(", ".join(f for f in files if MARKER.search((ROOT / f).read_text()))),
            file=sys.stderr,
        )
    if not args.check:  # pictures, not text: drawn again each time, never compared by --check
        import console_screenshots

        return console_screenshots.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
