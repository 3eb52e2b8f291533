"""`python scripts/replay_session.py ...` is `tradegraph replay SESSION_ID [--verify|--json|--html FILE]`: the same function as the CLI."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.kernel.transports.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["replay", *sys.argv[1:]]))
