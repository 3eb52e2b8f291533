"""One module per state; importing the package registers every node function by its state's name."""
from graph.nodes import (analyzing, debate, deciding, executing, memorizing, planning,  # noqa: F401
                         scanning, validating)
from graph.nodes.common import NODE_FUNCTIONS  # noqa: E402,F401
