"""The one way a run's files are opened: a backtest's, a sweep's and a benchmark's folder under experiments/, what
they read and write (config.json, episode_log.jsonl, trade_history.json, result.json, grid.json, results.*,
benchmark.json, the scorecard, the plots) and what `GET /tasks/{id}/artifacts/{name}` serves.

A run folder is a folder of its own and its files are files: the folder is opened without following a link
(O_NOFOLLOW | O_DIRECTORY) and each file by name relative to it, O_NOFOLLOW again, so a link planted in either place
is refused before anything is read, truncated or written through it (a run folder is writable by whoever can write
experiments/, and a backtest truncates a torn log: a link to ~/.bashrc must not be truncated). The refusal is one
line naming the path (UnsafeRunPath, bad input: exit 2, HTTP 422). The folders above the run folder (experiments/
itself, the home) may be links: the user put them there.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_MODES = {
    "r": os.O_RDONLY,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "r+": os.O_RDWR,
}
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeRunPath(ValueError):
    """A run's folder or file that is a link (or not a regular file): refused, one line naming the path."""


def _refuse(path: Path, what: str) -> UnsafeRunPath:
    return UnsafeRunPath(
        f"refusing {path}: {what} (a run's files must be regular files inside its folder; links are not followed)"
    )


def _folder_fd(folder: Path) -> int:
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(folder):
            raise _refuse(folder, "the run folder is a symbolic link") from None
        raise


def _check_not_link(path: Path, folder_fd: int) -> bool:
    """True when path's name exists in the folder as a regular file, False when absent; a link or anything other
    than a file is refused."""
    try:
        st = os.stat(path.name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "it is not a regular file")
    return True


def open_run_file(path: str | Path, mode: str = "r", **kwargs: Any) -> IO[Any]:
    """open(path, mode, **kwargs), refusing a link as the file or as its folder (UnsafeRunPath). Modes: r, w, a, x,
    r+, each with b or t. A file is opened non-blocking and made blocking once known to be a regular file, so a
    planted FIFO cannot hang the run either."""
    path = Path(path)
    base = mode.replace("b", "").replace("t", "")
    if base not in _MODES:
        raise ValueError(f"open_run_file: mode {mode!r} is not one of r, w, a, x, r+")
    folder_fd = _folder_fd(path.parent)
    try:
        try:
            fd = os.open(path.name, _MODES[base] | _NOFOLLOW | os.O_NONBLOCK, 0o666, dir_fd=folder_fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _refuse(path, "it is a symbolic link") from None
            if e.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
                raise _refuse(path, "it is not a regular file") from None
            raise
    finally:
        os.close(folder_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(path, "it is not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def run_file_exists(path: str | Path) -> bool:
    """The file is there (a regular file); False when it or its folder is absent; a link is refused."""
    path = Path(path)
    try:
        folder_fd = _folder_fd(path.parent)
    except FileNotFoundError:
        return False
    try:
        return _check_not_link(path, folder_fd)
    finally:
        os.close(folder_fd)


def read_run_text(path: str | Path) -> str:
    with open_run_file(path, "r", encoding="utf-8") as f:
        return f.read()


def read_run_bytes(path: str | Path) -> bytes:
    with open_run_file(path, "rb") as f:
        return f.read()


def write_run_atomic(path: str | Path, data: str | bytes) -> None:
    """Write a temporary file beside it, then rename it over the file: a reader sees the old or the new whole.
    A link where the file (or the temporary file) would be is refused, never replaced or written through."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open_run_file(
        tmp, "wb" if isinstance(data, bytes) else "w", **({} if isinstance(data, bytes) else {"encoding": "utf-8"})
    ) as f:
        f.write(data)
    folder_fd = _folder_fd(path.parent)
    try:
        _check_not_link(path, folder_fd)
        os.replace(tmp.name, path.name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    finally:
        os.close(folder_fd)


def save_figure(fig: Any, path: str | Path, **kwargs: Any) -> Path:
    """A matplotlib figure into a run file (its format from the suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_run_file(path, "wb") as f:
        fig.savefig(f, format=path.suffix.lstrip(".") or "png", **kwargs)
    return path


def iter_run_file(path: str | Path, chunk: int = 1 << 16) -> tuple[int, Iterator[bytes]]:
    """(size, the file's bytes in chunks) for an HTTP download: opened once, here, before the first chunk."""
    f = open_run_file(path, "rb")
    size = os.fstat(f.fileno()).st_size

    def chunks() -> Iterator[bytes]:
        with f:
            while block := f.read(chunk):
                yield block

    return size, chunks()
