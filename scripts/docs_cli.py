"""How scripts/docs_examples.py runs a command for the docs: the real CLI in this process (one interpreter start
instead of forty), with a clean environment and folder of its own, and what the terminal shows, relabelled.

Everything that names a run rather than its outputs is relabelled (`Labels`) before it is written: a session id
becomes a stand-in derived from the example's name (`standin`), temporary folders the folders the prose names, the
repository `~/tradegraph`, a loopback port the one the prose uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

# the caller's variables that would change an output: every one of tradegraph's, the model's, the store's
FOREIGN = re.compile(
    r"^(TRADEGRAPH_|OPENAI_|ANTHROPIC_|GOOGLE_|GEMINI_|OLLAMA_|OTEL_|MONGODB_URI$|XDG_DATA_HOME$|"
    r"FORCE_COLOR$|NO_COLOR$|TTY_|COLUMNS$|LINES$)"
)


@dataclass
class Block:
    name: str
    text: str
    masks: tuple[str, ...] = ()

    def __post_init__(self):
        self.text = "\n".join(line.rstrip() for line in self.text.strip("\n").split("\n"))


@dataclass
class Result:
    argv: tuple[str, ...]
    rc: int
    out: str
    err: str

    def session(self) -> str:
        """The session a command printed (its `--json` answer, or the approval screen's last line)."""
        try:
            return json.loads(self.out)["session_id"]
        except (ValueError, KeyError, TypeError):
            found = re.findall(r"session: (\S+)", self.out)
            if not found:
                raise RuntimeError(f"no session in the output of {shlex.join(self.argv)}: {self.err.strip()}") from None
            return found[-1]


def found(pattern: str, text: str) -> re.Match[str]:
    """The first match of a figure the prose quotes; an output without it breaks the prose's claim."""
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"no match for {pattern!r} in the output:\n{text}")
    return match


def standin(example: str) -> str:
    """A session id for an example, the same on every run: the README's ids stay put while outputs do."""
    return "s-" + hashlib.sha256(f"tradegraph docs: {example}".encode()).hexdigest()[:12]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Labels:
    """Real strings of this run and what the docs show instead, applied longest first."""

    shown: dict[str, str] = field(default_factory=dict)

    def add(self, real: str | Path, shown: str) -> None:
        self.shown[str(real)] = shown
        resolved = str(Path(real).resolve()) if str(real).startswith("/") else None
        if resolved and resolved != str(real):
            self.shown[resolved] = shown

    def apply(self, text: str) -> str:
        if not self.shown:
            return text
        pattern = re.compile("|".join(re.escape(k) for k in sorted(self.shown, key=len, reverse=True)))
        return pattern.sub(lambda m: self.shown[m.group(0)], text)


class Cli:
    """`tradegraph ARGS` through the real CLI in this process, with the environment each story gives it."""

    def __init__(self, base_env: dict[str, str], cwd: Path, labels: Labels):
        self.env, self.cwd, self.labels = base_env, cwd, labels

    def __call__(
        self,
        *argv: str,
        cwd: Optional[Path] = None,
        env: Optional[dict[str, str]] = None,
        columns: int = 110,
        ok: Optional[int] = 0,
    ) -> Result:
        from graph.transports.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        with (
            _environ({**self.env, "COLUMNS": str(columns), **(env or {})}),
            _cwd(cwd or self.cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                rc = main(list(argv))
            except SystemExit as e:  # argparse
                rc = e.code if isinstance(e.code, int) else 2
        result = Result(tuple(argv), rc, out.getvalue(), err.getvalue())
        if ok is not None and rc != ok:
            raise RuntimeError(f"`tradegraph {shlex.join(argv)}` exited {rc}, not {ok}:\n{result.err}{result.out}")
        return result

    def shown(self, result: Result, *, prefix: str = "", comment: str = "", out: bool = True) -> str:
        """The command as typed and what the terminal shows (stdout, then stderr), relabelled."""
        line = f"$ {prefix}tradegraph {shlex.join(result.argv)}" + (f"   # {comment}" if comment else "")
        text = "\n".join(
            [line]
            + ([result.out.rstrip("\n")] if out and result.out.strip() else [])
            + ([result.err.rstrip("\n")] if result.err.strip() else [])
        )
        return self.labels.apply(text)


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


# the width `tradegraph replay` prints at (graph/transports/cli/replay.py), whatever the terminal
REPLAY_WIDTH = 120
# how a line of `replay --verify` starts; any other line is the rest of the one before, wrapped by rich
REPLAY_LINE = re.compile(r"^(\$ |verify |cycle |hash chain|replay |WARNING| )")


def rewrapped(text: str, width: int) -> str:
    """A replay's output as the CLI would have wrapped it with the relabelled paths: rich breaks a long line at
    the console's width, so a path relabelled after the fact moves the breaks. Each wrapped line is joined back
    and wrapped again by rich at the same width. Rich breaks a word longer than the line anywhere, so the real paths
    are kept short (`generate`) and no word is that long."""
    from rich.console import Console
    from rich.text import Text

    lines: list[str] = []
    for line in text.split("\n"):
        if lines and not REPLAY_LINE.match(line):
            # a break between words keeps its space, unless the line was full (rich trims it there)
            lines[-1] += line if lines[-1].endswith(" ") else " " + line
        else:
            lines.append(line)
    screen = io.StringIO()
    console = Console(width=width, file=screen, highlight=False, color_system=None)
    for line in lines:
        console.print(Text(line))
    return screen.getvalue().rstrip("\n")


def fence(text: str) -> str:
    return f"```\n{text.rstrip()}\n```"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not FOREIGN.match(k)}
    return {**env, "TZ": "UTC", "TERM": "dumb", **extra}
