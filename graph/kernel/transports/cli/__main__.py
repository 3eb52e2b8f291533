"""`python -m graph.kernel.transports.cli`."""
import sys

from graph.kernel.transports.cli.main import main

sys.exit(main())
