"""kernelexec: stateful code execution on Jupyter kernels, for LLM agents.

import kernelexec
with kernelexec.Session() as session:
    print(session.execute("x = 41").text, session.execute("x + 1").text)
"""

# First, before the slow imports: it stars out a --token given on the command
# line in /proc/<pid>/cmdline, which everyone can read (see _containment/_secrecy.py).
from ._containment import _secrecy  # noqa: F401

# isort: split
from ._backends import DockerBackend, GatewayBackend, KernelBackend, LocalBackend
from ._client import (
    AsyncClient,
    AsyncRemoteExecution,
    AsyncRemoteSession,
    Client,
    RemoteExecution,
    RemoteSession,
)
from ._containment._sandbox import Sandbox
from ._exceptions import (
    AuthenticationError,
    CheckpointError,
    ConfigurationError,
    DiskSpaceError,
    EnvironmentBuildError,
    FileRefusedError,
    IncompatibleCheckpointError,
    KernelexecError,
    KernelStartError,
    QueueFullError,
    ServerError,
    SessionBusyError,
    SessionClosedError,
    SessionCulledError,
    SessionNotFoundError,
)
from ._execution._background import Execution, ExecutionEvent
from ._execution._data import ChartData, TableData
from ._execution._live import LiveOutput
from ._execution._models import ExecutionError, ExecutionResult, Limits, Status, Usage
from ._markdown._blocks import BlockResult
from ._ray import RayBackend
from ._remote_models import CheckpointInfo, FileInfo, SessionInfo
from ._session._async import AsyncSession
from ._session._pool import KernelPool
from ._session._replay import CellReplay, ReplayReport
from ._session._sync import Session, SyncExecution
from ._state._fork import ForkReport
from ._state._manifest import Checkpoint, CheckpointVariable, RestoreReport, SkippedVariable
from ._state._variables import Variable, VariableDetail
from ._version import __version__

__all__ = [
    "AsyncClient",
    "AsyncRemoteExecution",
    "AsyncRemoteSession",
    "AsyncSession",
    "AuthenticationError",
    "BlockResult",
    "CellReplay",
    "ChartData",
    "Checkpoint",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointVariable",
    "Client",
    "ConfigurationError",
    "DiskSpaceError",
    "DockerBackend",
    "EnvironmentBuildError",
    "Execution",
    "ExecutionError",
    "ExecutionEvent",
    "ExecutionResult",
    "FileInfo",
    "FileRefusedError",
    "ForkReport",
    "GatewayBackend",
    "IncompatibleCheckpointError",
    "KernelBackend",
    "KernelPool",
    "KernelStartError",
    "KernelexecError",
    "Limits",
    "LiveOutput",
    "LocalBackend",
    "QueueFullError",
    "RayBackend",
    "RemoteExecution",
    "RemoteSession",
    "ReplayReport",
    "RestoreReport",
    "Sandbox",
    "ServerError",
    "Session",
    "SessionBusyError",
    "SessionClosedError",
    "SessionCulledError",
    "SessionInfo",
    "SessionNotFoundError",
    "SkippedVariable",
    "Status",
    "SyncExecution",
    "TableData",
    "Usage",
    "Variable",
    "VariableDetail",
    "__version__",
]
