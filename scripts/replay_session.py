"""`python scripts/replay_session.py ...` is `tradegraph replay SESSION_ID [--verify|--json|--html FILE]`: the same function as the CLI."""

import sys

from _tradegraph import run  # this folder, first on the path when a script is run

if __name__ == "__main__":
    sys.exit(run("replay"))
