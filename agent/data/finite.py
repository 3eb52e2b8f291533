"""JSON whose every number is finite.

Python's json reads `NaN`, `Infinity` and `-Infinity` (not JSON, but what json.dumps writes by default) and turns an
overflowing literal such as `1e999` into inf; any of them would travel into a bundle as a figure nobody can act on.
`loads` reads them as markers instead, and `first_nonfinite` names where the first one sits, so a loader can refuse
the file naming its row and field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional


class NonFinite(str):
    """A number that is not finite, kept as the text it was written as."""


def _float(text: str) -> float | NonFinite:
    value = float(text)
    return value if math.isfinite(value) else NonFinite(text)


def loads(text: str | bytes) -> Any:
    """json.loads, with each non-finite number read as a NonFinite marker."""
    return json.loads(text, parse_constant=NonFinite, parse_float=_float)


def read_json(path: str | Path) -> Any:
    """The JSON document in a file, every non-finite number a NonFinite marker; DataError naming the file when it is
    missing, unreadable or not JSON (with the line)."""
    from agent.data.market import DataError

    p = Path(path)
    try:
        return loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:  # a folder, no permission, a binary file
        raise DataError(f"{p}: cannot read file: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{p}: line {exc.lineno}: invalid JSON ({exc.msg})") from None


def first_nonfinite(obj: Any, path: str = "") -> Optional[tuple[str, str]]:
    """(field path, the number as written) of the first non-finite number in `obj`, else None. The path names
    keys with dots and list positions in brackets: `financials.income_statement.revenues.value`, `items[3].score`."""
    if isinstance(obj, NonFinite):
        return path, str(obj)
    if isinstance(obj, dict):
        for key, value in obj.items():
            found = first_nonfinite(value, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found = first_nonfinite(value, f"{path}[{i}]")
            if found:
                return found
    return None


def nonfinite_message(found: tuple[str, str]) -> str:
    field, text = found
    return f"field '{field}': not a finite number ({text})"
