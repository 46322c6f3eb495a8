"""The exceptions kernelexec raises.

A user's code failing is never an exception: it comes back as an
``ExecutionResult`` with ``status="error"`` (or "timeout", "kernel_died").
These are raised only when kernelexec itself cannot do what was asked::

    KernelexecError
    ├── ConfigurationError   an argument or setting cannot work (bad work_dir, ...)
    │   ├── EnvironmentBuildError  the packages asked for could not be installed
    │   └── CheckpointError        a checkpoint could not be made or read (damaged, missing)
    │       └── IncompatibleCheckpointError  made by another Python or package versions
    ├── DiskSpaceError       a checkpoint, a fork's copy or a restore would not fit on disk
    │                        or in its byte budget; refused before writing
    ├── KernelStartError     no kernel could be started (missing ipykernel, bad spec, ...)
    ├── SessionClosedError   the session was used after close()
    ├── SessionBusyError     fork(wait=False) while an execution runs
    │   └── QueueFullError   too many background executions (or too much of their code) queued
    └── ServerError          a kernelexec server refused a request or could not be reached
        ├── AuthenticationError    the token is missing or wrong (HTTP 401)
        ├── SessionNotFoundError   no such session on the server (HTTP 404), or its
        │                          kernel was lost when the server restarted (HTTP 410)
        └── SessionCulledError     the session was culled for idleness (HTTP 409)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "CheckpointError",
    "ConfigurationError",
    "DiskSpaceError",
    "EnvironmentBuildError",
    "IncompatibleCheckpointError",
    "KernelStartError",
    "KernelexecError",
    "QueueFullError",
    "ServerError",
    "SessionBusyError",
    "SessionClosedError",
    "SessionCulledError",
    "SessionNotFoundError",
]


class KernelexecError(Exception):
    """Base class of every exception kernelexec raises."""


class ConfigurationError(KernelexecError):
    """An argument or setting cannot work; the message names the one to change."""


class EnvironmentBuildError(ConfigurationError):
    """A virtual environment or kernel image with the packages asked for could not be made.

    A venv's message names the package that failed and gives pip's or uv's
    reason (their last error lines, without this machine's paths); an image's
    ends with the useful tail of docker build's output.
    """


class CheckpointError(ConfigurationError):
    """A checkpoint could not be made, or what was given is not a readable checkpoint.

    The message names what is wrong (a missing or damaged manifest or variable
    file, a kernel without cloudpickle, a checkpoint that did not finish).

    Attributes:
        transient: True when the same checkpoint may well succeed later: it
            took too long, or an I/O error stopped it. Nothing about the
            kernel's state itself was in the way (unlike a dead kernel, or a
            kernel without cloudpickle).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient

    def __reduce__(self) -> tuple[Any, ...]:
        # Whole across a process boundary (a Ray node's host forks a kernel).
        return _rebuilt, (type(self), str(self), {"transient": self.transient})


class IncompatibleCheckpointError(CheckpointError):
    """The checkpoint was made by another Python (major.minor) or other package versions.

    Restore it with a kernel whose Python has the versions the message names.
    """


class DiskSpaceError(KernelexecError):
    """What was asked would not fit: the disk is (nearly) full, or it would pass a byte budget.

    Raised by a checkpoint, a fork's copy of the work dir and a restore,
    before they write what would not fit (or, when the disk filled up while
    they wrote, after removing what they wrote). The session is unchanged.
    The message says how much was needed, how much there is, and which
    setting (or which disk) to change.
    """


class FileRefusedError(KernelexecError):
    """A path of a session's files that cannot be read or written: malformed, outside the
    work dir, through a link, no regular file, or the transcript. The message says which.

    Attributes:
        reason: what was met ("invalid", "link", "missing", "not_a_file", "reserved", ...).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[FileRefusedError], tuple[str, str]]:
        return FileRefusedError, (self.reason, str(self))


class KernelStartError(KernelexecError):
    """A kernel could not be started; the message says why and what to do."""


class SessionClosedError(KernelexecError):
    """The session was closed; open a new one."""


class SessionBusyError(KernelexecError):
    """The session is running an execution and the caller said not to wait for it."""


class QueueFullError(SessionBusyError):
    """The session already holds as many background executions as it may queue.

    Each session keeps at most a number of executions not yet ended, and at
    most so much of their code, so that a caller queueing without end cannot
    take all of the memory. Wait for one to end (``Execution.wait``), or
    cancel one.

    Attributes:
        retry_after: seconds after which trying again is worth it.
    """

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerError(KernelexecError):
    """A kernelexec server refused a request, or could not be reached.

    Attributes:
        status: the HTTP status, or None when no answer came.
        code: the server's error code (``"too_many_sessions"``, ...), or
            ``"unreachable"`` when no answer came.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class AuthenticationError(ServerError):
    """The server wants another token: pass the one ``kernelexec serve`` printed."""


class SessionNotFoundError(ServerError):
    """The server has no such session: it was deleted, or the server restarted."""


class SessionCulledError(ServerError):
    """The session sat idle too long and its kernel was shut down; its files are kept."""


def _rebuilt(cls: type[Exception], message: str, keywords: dict[str, Any]) -> Exception:
    """An exception of ``cls`` made again from what ``__reduce__`` kept of it."""
    return cls(message, **keywords)
