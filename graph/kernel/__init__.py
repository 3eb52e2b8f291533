"""The capability kernel: every transport (Python client, CLI, HTTP, MCP) is a thin adapter over it.

Layering: kernel imports graph/database/agent/schemas; nothing below imports kernel. The kernel itself (which loads
the whole machine) is imported on first use, so a command that never runs one (`--version`, `--help`) starts fast.
"""

from graph.kernel.errors import (
    BadInput,
    Conflict,
    Failed,
    Forbidden,
    KernelError,
    NotFound,
    StoreUnavailable,
    Unauthorized,
)

__all__ = [
    "Kernel",
    "Capability",
    "CAPABILITIES",
    "KernelError",
    "BadInput",
    "NotFound",
    "Conflict",
    "Forbidden",
    "Unauthorized",
    "StoreUnavailable",
    "Failed",
]


def __getattr__(name: str):
    if name == "Kernel":
        from graph.kernel.core import Kernel

        return Kernel
    if name in ("Capability", "CAPABILITIES"):
        from graph.kernel import capabilities

        return getattr(capabilities, name)
    raise AttributeError(f"module 'graph.kernel' has no attribute {name!r}")
