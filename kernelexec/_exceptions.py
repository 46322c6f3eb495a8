"""The exceptions kernelexec raises.

A user's code failing is never an exception: it comes back as an
``ExecutionResult`` with ``status="error"`` (or "timeout", "kernel_died").
These are raised only when kernelexec itself cannot do what was asked::

    KernelexecError
    ├── ConfigurationError   an argument or setting cannot work (bad work_dir, ...)
    ├── KernelStartError     no kernel could be started (missing ipykernel, bad spec, ...)
    └── SessionClosedError   the session was used after close()
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "KernelStartError",
    "KernelexecError",
    "SessionClosedError",
]


class KernelexecError(Exception):
    """Base class of every exception kernelexec raises."""


class ConfigurationError(KernelexecError):
    """An argument or setting cannot work; the message names the one to change."""


class KernelStartError(KernelexecError):
    """A kernel could not be started; the message says why and what to do."""


class SessionClosedError(KernelexecError):
    """The session was closed; open a new one."""
