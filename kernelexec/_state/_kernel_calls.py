"""kernelexec's own code run in the kernel, for a checkpoint or a restore.

The kernel side (``_kernel/checkpoint.py``) is sent as code, not imported:
the kernel may be another Python, a venv's or a container's, that has no
kernelexec. It runs silently where the backend allows it (no history entry,
no execution count) and binds no name in the user's namespace.
"""

from __future__ import annotations

import errno
import json
import time
from typing import Any

from .._backends import DROPPED, KernelBackend
from .._exceptions import CheckpointError, DiskSpaceError
from .._kernel import BOOT_DIR

__all__ = ["kernel_call", "run_silently"]

_KERNEL_SOURCE = (BOOT_DIR / "checkpoint.py").read_text(encoding="utf-8")
_POLL = 0.2
_GRACE = 5.0


def kernel_call(function: str, *args: Any) -> str:
    """Code that runs the kernel-side module's ``function`` and binds no name."""
    return (
        "(lambda ns: (exec(compile(ns.pop('source'), '<kernelexec checkpoint>', 'exec'), ns), "
        f"ns[{function!r}](*ns.pop('args'))))"
        f"({{'__name__': 'kernelexec_checkpoint', 'source': {_KERNEL_SOURCE!r}, "
        f"'args': __import__('json').loads({json.dumps(list(args))!r})}})"
    )


async def run_silently(backend: KernelBackend, code: str, *, timeout: float, what: str) -> None:
    """Runs kernelexec's own code in the kernel and waits for its reply.

    Local and Docker kernels get a silent request: no history entry, no
    execution count, no events. Other backends get an ordinary one.

    Raises:
        CheckpointError: the code failed, the kernel died, or it took longer
            than ``timeout`` (the kernel is then interrupted).
    """
    send = getattr(backend, "_send_execute", None)
    if callable(send):
        msg_id = send(code, allow_stdin=False, silent=True)
    else:
        msg_id = await backend.execute(code, allow_stdin=False)
    deadline = time.monotonic() + timeout
    interrupted = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if interrupted:
                raise CheckpointError(
                    f"{what} did not finish within {timeout:g} s, nor stop when interrupted; "
                    "restart the session",
                    transient=True,
                )
            await backend.interrupt()
            interrupted, deadline = True, time.monotonic() + _GRACE
            continue
        item = await backend.receive(min(_POLL, remaining))
        if item is None:
            if not await backend.is_alive():
                reason = backend.exit_reason() or "cause unknown"
                raise CheckpointError(f"the kernel died during {what} ({reason})")
            continue
        channel, msg = item
        if channel == DROPPED and msg["content"]["channel"] in ("shell", None):
            raise CheckpointError(
                f"the kernel's reply to {what} may be lost: a message over the host's cap of "
                f"{msg['content']['cap']:,} bytes (Limits.max_message_bytes) was dropped unread"
            )
        if channel != "shell" or (msg.get("parent_header") or {}).get("msg_id") != msg_id:
            continue
        content = msg.get("content") or {}
        if interrupted:
            raise CheckpointError(
                f"{what} did not finish within {timeout:g} s and was interrupted; "
                "pass a longer timeout",
                transient=True,
            )
        if content.get("status") != "ok":
            raise _kernel_failure(what, content)
        return


def _kernel_failure(what: str, content: dict[str, Any]) -> Exception:
    """The error for a failed reply: a full disk, a passing failure, or one that stays.

    The kernel's words are only read for the kind of failure, which can at
    most make the owner keep a session's kernel or answer 507.
    """
    ename, evalue = str(content.get("ename", "Error")), str(content.get("evalue", ""))
    text = f"{what} failed in the kernel: {ename}: {evalue[:1000]}"
    if any(f"[Errno {e}]" in evalue for e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)):
        return DiskSpaceError(f"{text}; free some space on the disk of the work dir")
    # An I/O error or a lack of memory may pass; a missing cloudpickle will not.
    return CheckpointError(text, transient=ename in ("OSError", "MemoryError", "IOError"))
