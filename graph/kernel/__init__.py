"""The capability kernel: every transport (Python client, CLI, HTTP, MCP) is a thin adapter over it.

Layering: kernel imports graph/database/agent/schemas; nothing below imports kernel.
"""
from graph.kernel.capabilities import CAPABILITIES, Capability
from graph.kernel.core import Kernel
from graph.kernel.errors import (BadInput, Conflict, Failed, Forbidden, KernelError, NotFound, StoreUnavailable,
                           Unauthorized)

__all__ = ["Kernel", "Capability", "CAPABILITIES", "KernelError", "BadInput", "NotFound", "Conflict", "Forbidden",
           "Unauthorized", "StoreUnavailable", "Failed"]
