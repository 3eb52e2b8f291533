"""Output into a pipe the reader closed early (`tradegraph run … | head -1`): the command still ends with its own
exit code and no traceback. The first write or flush that meets the closed pipe points stdout at /dev/null (the
Python documentation's recipe for SIGPIPE), so the rest of the command's output, and the interpreter's last flush at
exit (which would otherwise print "Exception ignored … BrokenPipeError" and exit 120), go nowhere."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class PipeTolerant:
    """A stdout whose closed reader is not an error: what the command decided (its exit code) stands."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # a stream with no file descriptor (a test's capture)
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def closed_pipe_tolerated() -> Iterator[PipeTolerant]:
    """sys.stdout as a PipeTolerant while the command runs, flushed before it returns its code."""
    original = sys.stdout
    tolerant = PipeTolerant(original)
    sys.stdout = tolerant
    try:
        yield tolerant
    finally:
        tolerant.flush()
        if sys.stdout is tolerant:
            sys.stdout = original
