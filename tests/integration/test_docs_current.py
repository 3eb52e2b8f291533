"""The example outputs of README.md and the guides in docs/ are what the commands print today: scripts/make_docs.py
--check runs every one of them offline in a fresh store and fails with the diff when a block drifted (`make docs`
rewrites them). The rules it compares by (what is masked, what keeps the old text) are pinned on small inputs."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
make_docs = importlib.import_module("make_docs")
Block = importlib.import_module("docs_examples").Block


@pytest.mark.integration
def test_the_docs_show_what_the_commands_print_today(tmp_path):
    # hermetic by itself: its stores and folders in a temporary folder of its own, none of the caller's variables
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_docs.py"), "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"the docs no longer match the outputs (run `make docs`):\n{r.stdout}\n{r.stderr[-4000:]}"
    assert "current" in r.stderr


DOC = """intro
<!-- docs:screen -->
```
cycle s-1:c1  status: completed
started 2026-11-24 23:19  events: 575  828.7 KB
```
<!-- /docs:screen -->
about <!-- docs:cost -->23.0k tokens<!-- /docs:cost --> a cycle
"""


def blocks(screen: str, cost: str = "23.0k tokens") -> dict:
    return {"screen": Block("screen", screen, masks=("clock", "size")), "cost": Block("cost", cost)}


def test_a_block_that_matches_is_left_as_it_is():
    same = "```\ncycle s-1:c1  status: completed\nstarted 2026-11-24 23:19  events: 575  828.7 KB\n```"
    assert make_docs.rewrite(DOC, blocks(same), "DOC", set()) == DOC


def test_a_changed_output_line_is_rewritten_and_a_changed_inline_phrase_too():
    fresh = "```\ncycle s-1:c1  status: rejected\nstarted 2026-11-24 23:19  events: 575  828.7 KB\n```"
    new = make_docs.rewrite(DOC, blocks(fresh, "21.4k tokens"), "DOC", set())
    assert "status: rejected" in new and "status: completed" not in new
    assert "about <!-- docs:cost -->21.4k tokens<!-- /docs:cost --> a cycle" in new


def test_a_masked_difference_keeps_the_old_text_but_an_unmasked_number_does_not():
    later = "```\ncycle s-1:c1  status: completed\nstarted 2027-01-02 08:00  events: 575  829.1 KB\n```"
    assert make_docs.rewrite(DOC, blocks(later), "DOC", set()) == DOC  # a time and a size: masked here
    more = "```\ncycle s-1:c1  status: completed\nstarted 2026-11-24 23:19  events: 576  828.7 KB\n```"
    assert "events: 576" in make_docs.rewrite(DOC, blocks(more), "DOC", set())


def test_trailing_blanks_are_not_a_difference():
    padded = DOC.replace("status: completed", "status: completed   ")
    same = "```\ncycle s-1:c1  status: completed\nstarted 2026-11-24 23:19  events: 575  828.7 KB\n```"
    assert make_docs.rewrite(padded, blocks(same), "DOC", set()) == padded


def test_a_marker_without_a_generator_is_refused():
    with pytest.raises(make_docs.DocsError, match="docs:cost has no generator"):
        make_docs.rewrite(DOC, {"screen": blocks("x")["screen"]}, "DOC", set())
