"""One module per state; importing the package registers every node function by its state's name."""

from graph.machine.nodes import analyzing, debate, deciding, executing, memorizing, planning, scanning, validating  # noqa: F401
from graph.machine.nodes.common import NODE_FUNCTIONS  # noqa: F401
