"""One module per state; importing the package registers every node function by its state's name."""
from graph.machine.nodes import (analyzing, debate, deciding, executing, memorizing, planning,  # noqa: F401
                         scanning, validating)
from graph.machine.nodes.common import NODE_FUNCTIONS  # noqa: F401
