"""`python -m graph.transports.cli`."""

import sys

from graph.transports.cli.main import main

sys.exit(main())
