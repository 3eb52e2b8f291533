"""Where a StockBench `storage/` tree is and which of its files are read: a folder (a checkout, DIR or DIR/storage)
or a tar archive of it (the shipped one). Its content hash, and a cheaper fingerprint that says when to take it again.

Only the files the reader uses count (bars, news, filings, corporate actions): a checkout's other caches (LLM
answers, logs) neither change the hash nor get read.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.data.market import DataError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
# paths relative to the storage root; group 1 is the part, the rest names symbol and date
READ = re.compile(
    r"^(?:parquet/(?P<bar_sym>[^/]+)/day/(?P<bar_day>\d{4}-\d{2}-\d{2})\.parquet"
    r"|cache/news_by_day/(?P<news_sym>[^/]+)/(?P<news_day>\d{4}-\d{2}-\d{2})\.json"
    r"|cache/financials/(?P<fin_sym>[^/]+)\.(?P<fin_kind>quarterly|annual)\.json"
    r"|cache/corporate_actions/(?P<ca_sym>[^/]+)\.(?P<ca_kind>dividends|splits)\.json)$"
)
_SUBTREES = ("parquet", "cache/news_by_day", "cache/financials", "cache/corporate_actions")


@dataclass(frozen=True)
class Tree:
    path: Path  # what the user named: the folder or the archive, resolved
    root: Path  # the storage root within a folder (path itself for an archive)
    archive: bool

    def where(self, rel: str) -> str:
        """How an error names one file of the tree."""
        return f"{self.path}: {rel}" if self.archive else str(self.root / rel)


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def locate(path: Path) -> Tree | None:
    """The tree at `path` (resolved), or None when it is no StockBench folder or archive by its shape. An archive is
    recognised by its name; whether it holds a tree is known once read."""
    if path.is_dir():
        for root in (path / "storage", path):
            if (root / "parquet").is_dir():
                return Tree(path, root, archive=False)
        return None
    if path.is_file() and is_archive(path):
        return Tree(path, path, archive=True)
    return None


def _archive_rel(name: str) -> str:
    """A member's path relative to the storage root: `storage/parquet/...` or `parquet/...`."""
    name = name.lstrip("./") if name.startswith("./") else name
    return name[len("storage/") :] if name.startswith("storage/") else name


def _folder_files(tree: Tree) -> Iterator[tuple[str, os.stat_result]]:
    """(path relative to the root, stat) of each file read, in walk order. A file that is a link to something
    outside the tree is refused: a tree allowed as a folder (TRADEGRAPH_DATA_DIRS) reads nothing beyond it."""
    root = tree.root.resolve()
    for sub in _SUBTREES:
        top = tree.root / sub
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, tree.root).replace(os.sep, "/")
                if not READ.match(rel):
                    continue
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    target = Path(full).resolve()
                    if not target.is_relative_to(root):
                        raise DataError(f"{full}: a link to {target}, outside the tree: not read")
                    st = os.stat(full)
                yield rel, st


def fingerprint(tree: Tree) -> str:
    """Changes whenever a file read changes (size or modification time), appears or goes: the key of the loaded
    tree within a process. An archive's is its own stat; a folder's, every read file's (one stat each)."""
    if tree.archive:
        st = tree.path.stat()
        return f"{st.st_mtime_ns}:{st.st_size}"
    digest = hashlib.sha256()
    for rel, st in _folder_files(tree):
        digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def read_files(tree: Tree) -> dict[str, bytes]:
    """Every read file's bytes by its path relative to the storage root."""
    out: dict[str, bytes] = {}
    if not tree.archive:
        for rel, _ in _folder_files(tree):
            try:
                out[rel] = (tree.root / rel).read_bytes()
            except OSError as exc:
                raise DataError(f"{tree.where(rel)}: cannot read file: {exc}") from None
        return out
    try:
        with tarfile.open(tree.path) as tar:
            for member in tar:
                rel = _archive_rel(member.name)
                data = tar.extractfile(member) if member.isfile() and READ.match(rel) else None
                if data is not None:  # extractfile gives a regular file's bytes, None for anything else
                    out[rel] = data.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{tree.path}: cannot read archive: {exc}") from None
    return out


def content_sha256(tree: Tree, files: dict[str, bytes] | None = None) -> str:
    """What a run manifest records. An archive: the sha256 of its bytes. A folder: the sha256 over every read
    file's relative path and the sha256 of its bytes, in path order (`files` when already read)."""
    if tree.archive:
        return file_sha256(tree.path)
    digest = hashlib.sha256()
    for rel in sorted(files if files is not None else [r for r, _ in _folder_files(tree)]):
        data = files[rel] if files is not None else (tree.root / rel).read_bytes()
        digest.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
