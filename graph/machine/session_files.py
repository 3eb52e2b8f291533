"""The data files a continued session reads, found from its last recorded manifest.

Apart from graph/machine/manifest.py (which builds manifests and imports the agent's tools, prompts and LangChain)
so that a view of a stored session (`tradegraph portfolio`, a backtest continuing one) reads its files without
loading the machine.
"""

from __future__ import annotations

from agent.data.market import DataError
from agent.data.sources import BY_ATTR, DataFiles, is_bundled
from schemas.events import EventParseError, ManifestEvent, ManifestPayload, parse_event


def last_manifest(store, session_id: str) -> ManifestPayload | None:
    """The manifest of the session's latest cycle that recorded one (a few indexed reads, not the session); one
    that is no manifest this code reads is bad data, named (its files cannot be known from it)."""
    for cycle_id in reversed(store.events.cycle_ids(session_id)):
        found = store.events.read(session_id, kind="manifest", cycle_id=cycle_id)
        if found:
            try:
                manifest = parse_event(found[-1])
            except EventParseError as e:
                raise DataError(f"session '{session_id}': its last manifest cannot be read: {e}") from None
            assert isinstance(manifest, ManifestEvent)  # read by its kind
            return manifest.payload
    return None


def session_files(store, session_id: str | None, given: DataFiles) -> DataFiles:
    """The files a continued session reads: each one given, else the one its last cycle read (by path: a file the
    user appended a day to is read as it is now), else the bundled sample. A recorded source that was not a file
    (in-memory data from Python) must be given again: nothing else stands in for it."""
    manifest = last_manifest(store, session_id) if session_id else None
    recorded: dict[str, str] = {}
    for attr, entry in ((manifest.data if manifest else None) or {}).items():
        kind = BY_ATTR.get(attr)
        if kind is None or kind.name in given.given() or entry.get("bundled"):
            continue
        if not entry.get("sha256"):
            raise DataError(
                f"session '{session_id}' read its {kind.name} from {entry.get('source')}, not a file: "
                f"name the {kind.name} file to continue it"
            )
        if not is_bundled(kind.name, entry["source"]):  # a recording from before bundled samples were marked
            recorded[kind.name] = entry["source"]
    return given.over(DataFiles(**recorded))
