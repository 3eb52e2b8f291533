"""One typed read path for the log (issue 29): product code reads an event's payload through schemas/events.py
(`parse_event`, `parse_all`, the event classes), never by string key on the stored document, so a payload's shape
is said in one place and an older one is lifted by the upcasters before anyone reads it.

database/ is left out on purpose: the store works on events as stored, not as read. It hashes the stored bytes
(the hash chain must keep verifying a version-1 log after its kinds were split), packs and unpacks payloads into
blobs, and reads a manifest's signing mark before any typed reader exists; an upcast copy there would change what
is hashed and stored."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "graph", "bench", "scripts")
# payload["x"], payload.get("x"), doc["payload"], doc.get("payload"), with either quote
RAW_READ = re.compile(r"""payload\[["']|payload\.get\(|\[["']payload["']\]|\.get\(["']payload["']\)""")


def raw_payload_reads(roots: tuple[str, ...] = PRODUCT) -> list[str]:
    found = []
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if RAW_READ.search(line.split("#", 1)[0]):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return found


def test_product_code_reads_no_payload_by_string_key():
    assert raw_payload_reads() == []


def test_the_check_sees_each_form_of_raw_read(tmp_path):
    """The pattern is not vacuous: every way a raw read was written in product code is caught, typed reads are not."""
    raw = [
        'e["payload"]["status"]',
        "e['payload'].get('type')",
        'payload.get("key")',
        "payload['text']",
        'cited.get("payload")',
    ]
    typed = [
        "ev.payload.status",
        "parse_event(doc).payload.to",
        'new_event(s, c, "RUNNER", "error", payload)',
        'match data:\n    case {"kind": kind, "payload": payload}:',
    ]
    assert all(RAW_READ.search(line) for line in raw)
    assert not any(RAW_READ.search(line) for line in typed)
