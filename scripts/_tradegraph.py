"""What every script here does: run one `tradegraph` command from this source tree. On a Python that can't (too
old, or without tradegraph's dependencies: the system one), one line says which Python to use, not a traceback.

Kept to syntax any Python 3 parses, so the line shows even where tradegraph itself would not import."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def wrong_python(why):
    """The one line for a Python that can't run tradegraph; exit code 2 (like any bad input)."""
    again = "{} {}".format(VENV_PYTHON, " ".join(sys.argv)).rstrip()
    if VENV_PYTHON.exists():
        how = "use " + again
    else:
        how = f"run `make run` in {ROOT} first (it creates .venv), then {again}"
    sys.stderr.write(f"tradegraph: error: {sys.executable} ({why}): {how}\n")
    return 2


def unusable():
    """None when this Python can run tradegraph from this source tree (then on its path); else the exit code, after
    the one line saying which Python to use."""
    if sys.version_info < (3, 11):
        return wrong_python("Python {}.{}; tradegraph needs 3.11 or newer".format(*sys.version_info[:2]))
    sys.path.insert(0, str(ROOT))
    try:
        import graph.transports.cli.main  # noqa: F401 (all of tradegraph's dependencies, imported once)
    except ImportError as e:
        return wrong_python(f"no module named {e.name or str(e)!r}: tradegraph's dependencies are not installed for it")
    return None


def run(command):
    """`tradegraph COMMAND ARGS...` with this script's arguments; its exit code."""
    problem = unusable()
    if problem is not None:
        return problem
    from graph.transports.cli.main import main

    return main([command] + sys.argv[1:])
