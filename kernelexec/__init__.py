"""kernelexec: stateful code execution on Jupyter kernels, for LLM agents.

    import kernelexec
    with kernelexec.Session() as session:
        print(session.execute("x = 41").text, session.execute("x + 1").text)
"""

from ._backends import KernelBackend, LocalBackend
from ._exceptions import ConfigurationError, KernelexecError, KernelStartError, SessionClosedError
from ._models import ExecutionError, ExecutionResult, Limits, Status
from ._session import AsyncSession
from ._sync import Session

__version__ = "0.1.0"

__all__ = [
    "AsyncSession",
    "ConfigurationError",
    "ExecutionError",
    "ExecutionResult",
    "KernelBackend",
    "KernelStartError",
    "KernelexecError",
    "Limits",
    "LocalBackend",
    "Session",
    "SessionClosedError",
    "Status",
    "__version__",
]
