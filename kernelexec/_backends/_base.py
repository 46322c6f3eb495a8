"""The small interface every kernel backend implements."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

__all__ = ["KernelBackend", "KernelMessage"]

KernelMessage = tuple[str, dict[str, Any]]
"""(channel, message): channel is "iopub", "shell" or "stdin", or "dropped" for
the backend's notice that a message from the kernel was over the host's cap and
was dropped unread (see ``kernelexec._backends._caps``)."""


class KernelBackend(Protocol):
    """One kernel, somewhere, spoken to over the Jupyter messaging protocol.

    ``execute`` sends a request and ``receive`` yields the kernel's messages
    one at a time with a bound on the wait, so the session can check its
    deadline and the kernel's life between messages without a task per message.

    ``max_message_bytes`` is the host's cap on one message from the kernel
    (``Limits.max_message_bytes``); the session sets it before ``start``. A
    bigger message is dropped before it is decoded or held whole, and
    ``receive`` yields a "dropped" notice in its place.
    """

    max_message_bytes: int

    async def start(self, *, cwd: Path, env: dict[str, str]) -> None:
        """Starts the kernel and returns once it answers."""

    async def execute(self, code: str, *, allow_stdin: bool) -> str:
        """Sends an execute request; returns its msg_id."""

    async def request_kernel_info(self) -> str:
        """Sends a kernel_info request on the shell channel; returns its msg_id.

        The kernel answers shell requests in order, so its reply (and its
        status on IOPub) says that everything the kernel sent about the
        requests before it has come, or was lost.
        """

    async def receive(self, timeout: float) -> KernelMessage | None:
        """The next message from any channel, or None after ``timeout`` seconds."""

    async def send_input(self, value: str) -> None:
        """Answers the kernel's pending input request."""

    async def interrupt(self) -> None: ...

    async def restart(self) -> None:
        """Replaces the kernel with a fresh one in the same cwd and env."""

    async def shutdown(self) -> None:
        """Stops the kernel and everything it started; safe to call twice."""

    async def is_alive(self) -> bool: ...

    def exit_reason(self) -> str | None:
        """How the kernel ended ("exit status 1", "signal SIGKILL"), if known."""
