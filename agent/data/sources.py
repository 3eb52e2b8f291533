"""Which files a run reads: a user's own prices, news, fundamentals and corporate actions, or the bundled samples.

Users name them `prices`, `news` and `fundamentals` (the CLI flags, tradegraph.toml's [data] keys, the kernel's
input fields) and `corporate_actions`; a cycle's services and the run manifest hold them as `market`, `news`, `fundamentals`
and `actions`. A StockBench tree (a folder or an archive) gives every kind at once: `load_file(kind, tree)`, or
`stockbench_files(tree)` for all of them. A file is loaded once per version (resolved path, size, modification time;
a tree: every file it reads): services built per call stay cheap, and a backtest's cycles share one MarketData, so
indicators are computed once per symbol.
"""

from __future__ import annotations

import functools
import stat
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional

from agent.data.actions import NO_ACTIONS, default_actions, load_actions
from agent.data.fundamentals import SAMPLE_FUNDAMENTALS, default_fundamentals, load_fundamentals
from agent.data.market import VENDORED_CSV, DataError, default_market_data, load_market_data
from agent.data.news import SAMPLE_NEWS, default_news, load_news
from agent.data.stockbench import SHIPPED_ARCHIVE, load_tree
from agent.data.stockbench.tree import is_archive, locate


@dataclass(frozen=True)
class Kind:
    name: str  # what users type: prices
    attr: str  # what CycleServices and the manifest call it: market
    load: Callable[[str], Any]
    bundled: Path
    default: Callable[[], Any]  # the bundled sample, loaded once per process


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("prices", "market", load_market_data, VENDORED_CSV, default_market_data),
        Kind("news", "news", load_news, SAMPLE_NEWS, default_news),
        Kind("fundamentals", "fundamentals", load_fundamentals, SAMPLE_FUNDAMENTALS, default_fundamentals),
        # dividends and splits; "none" for the bundled prices, whose adjusted close already carries them
        Kind("corporate_actions", "actions", load_actions, NO_ACTIONS, default_actions),
    )
}
BY_ATTR: dict[str, Kind] = {k.attr: k for k in KINDS.values()}


@dataclass(frozen=True)
class DataFiles:
    """Paths of a user's own files; None leaves that kind to someone else (a session's record, the bundled sample)."""

    prices: Optional[str] = None
    news: Optional[str] = None
    fundamentals: Optional[str] = None
    corporate_actions: Optional[str] = None

    def given(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def over(self, fallback: Optional[DataFiles]) -> DataFiles:
        """Each file given here, else the fallback's."""
        return self if fallback is None else DataFiles(**{**fallback.given(), **self.given()})


def resolved(path: str | Path) -> Path:
    """The absolute path a user's `path` names (~ expanded, against this process's working directory)."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # ~nosuchuser, a symlink loop, a NUL byte
        raise DataError(f"{path}: not a usable path: {exc}") from None


def is_bundled(kind: str, path: str | Path) -> bool:
    return resolved(path) == KINDS[kind].bundled.resolve()


def stockbench_files(path: str | Path | None = None) -> DataFiles:
    """Every kind read from one StockBench tree: a folder (a checkout, DIR or DIR/storage) or an archive of it;
    None is the archive shipped with tradegraph. The tree is read here, so a bad one raises DataError now."""
    p = resolved(SHIPPED_ARCHIVE if path is None else path)
    load_tree(p)
    return DataFiles(**{kind: str(p) for kind in KINDS})


def load_file(kind: str, path: str | Path) -> Any:
    """The `kind` source read from `path`: a file of that kind, or a StockBench tree (a folder or a .tar.gz of
    one), whose part of that kind is returned. A bad file raises DataError naming it: missing, not a regular file,
    unreadable, or malformed (file, row, column)."""
    p = resolved(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    except OSError as exc:  # a name too long, no permission on a folder above it
        raise DataError(f"{p}: cannot read file: {exc}") from None
    if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and is_archive(p)):
        if locate(p) is None:
            raise DataError(f"{p}: not a regular file, nor a StockBench data tree (no storage/parquet/ in it)")
        return load_tree(p).source(kind)
    if not stat.S_ISREG(st.st_mode):  # a device, a pipe: nothing to parse, maybe never an end
        raise DataError(f"{p}: not a regular file")
    if p == KINDS[kind].bundled.resolve():  # the same object as the default: its indicator frames are shared
        return KINDS[kind].default()
    return _load_version(kind, str(p), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _load_version(kind: str, path: str, mtime_ns: int, size: int) -> Any:
    return KINDS[kind].load(path)


def load_sources(files: Optional[DataFiles]) -> dict[str, Any]:
    """CycleServices attribute -> source for each file given; kinds not given are left out (the bundled default)."""
    return {KINDS[k].attr: load_file(k, p) for k, p in (files.given() if files else {}).items()}


class Unavailable:
    """Stands in for a source that must not be read: a replay's recorded file that changed or is gone. Any use
    raises naming the file and why, so a re-execution never silently reads other data."""

    def __init__(self, path: str, why: str) -> None:
        self.source = self.origin = path  # what the manifest and messages name
        self.why = why

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and weakref probes are not reads
            raise AttributeError(name)
        raise DataError(f"{self.source}: {self.why}")

    def __repr__(self) -> str:
        return f"Unavailable({self.source!r}: {self.why})"
