"""`python -m graph.transports.mcp [--http PORT]`: the MCP server without the tradegraph command, checked at start
like `tradegraph mcp` (graph/transports/serve_cli.py owns both parsers)."""

import sys

from graph.transports.gc_tuning import collect_garbage_less_often
from graph.transports.serve_cli import mcp_main, standalone_parser

if __name__ == "__main__":
    collect_garbage_less_often()
    sys.exit(mcp_main(standalone_parser("mcp").parse_args()))
